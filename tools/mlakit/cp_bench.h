#pragma once
// `mlakit bench --mode cp`: decode context parallelism over the GPUs of this process (cp_bench.cpp; a build without
// NCCL links cp_bench_none.cpp, which says so).

#include <cstdint>

#include "args.h"
#include "mlakit/registry.h"

namespace mlakit::cli {

/// Runs the cp shapes (issue 12's targets, or the shape of --batch/--ctx/--heads/...) on 1 GPU and on --gpus N
/// (default: every visible GPU) with --interleave I (default 1). Returns the process exit code.
int bench_cp(const Args& args, const Registry& registry, const Preference& pref, int64_t iters);

}  // namespace mlakit::cli
