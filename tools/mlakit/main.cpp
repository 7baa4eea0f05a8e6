// mlakit: inspect the build (info), time decode (bench), explain backend choice (check).

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>

#include "commands.h"

namespace {

constexpr const char* kUsage = R"(usage: mlakit <command> [options]

commands:
  info    version, build options, GPUs, and every backend with what it supports
  bench   time decode on a preset workload (default: DeepSeek-V3 TP8 step, b=128, L=8192, h_q=16);
          without a GPU it runs the CPU reference at b=2, L=1024 and says so
  check   explain which backend a decode call would use and why the others were passed over

Run `mlakit <command> --help` for the options of a command.
)";

int dispatch(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  const char* cmd = argv[1];
  if (!std::strcmp(cmd, "info")) return mlakit::cli::cmd_info(argc, argv);
  if (!std::strcmp(cmd, "bench")) return mlakit::cli::cmd_bench(argc, argv);
  if (!std::strcmp(cmd, "check")) return mlakit::cli::cmd_check(argc, argv);
  std::fprintf(stderr, "command=%s: unknown; must be one of info, bench, check\n\n%s", cmd, kUsage);
  return 2;
}

}  // namespace

// The commands check sizes before allocating and report a failed allocation with its byte count; this is the
// last resort for an allocation they did not foresee: a clear error and status 1, never an abort.
int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "mlakit %s: allocation failed (out of host memory)\n", argc > 1 ? argv[1] : "");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlakit %s: %s\n", argc > 1 ? argv[1] : "", e.what());
  }
  return 1;
}
