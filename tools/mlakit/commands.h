#pragma once
// The subcommands of `mlakit`. Each returns the process exit code.

namespace mlakit::cli {

int cmd_info(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_check(int argc, char** argv);

}  // namespace mlakit::cli
