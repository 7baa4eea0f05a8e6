// `mlakit bench --mode cp` in a build without NCCL: says why it cannot run.

#include <cstdio>

#include "cp_bench.h"
#include "mlakit/context_parallel.h"

namespace mlakit::cli {

int bench_cp(const Args&, const Registry&, const Preference&, int64_t) {
  std::fprintf(stderr, "--mode cp: this build has no context-parallel decode (%s)\n", nccl_build_info().c_str());
  return 2;
}

}  // namespace mlakit::cli
