// `mlakit info`: version, build, devices, and the support matrix (every backend x operation).

#include <cstdio>

#include "args.h"
#include "commands.h"
#include "device_memory.h"
#include "mlakit/context_parallel.h"
#include "mlakit/registry.h"

namespace mlakit::cli {

int cmd_info(int argc, char** argv) {
  Args args;
  if (Status s = Args::parse(argc, argv, 2, {}, {"help", "markdown"}, &args); !s.ok() || args.has("help")) {
    if (!s.ok()) std::fprintf(stderr, "%s\n", s.message().c_str());
    std::puts("usage: mlakit info [--markdown]\n  --markdown  print the support matrix as a Markdown table");
    return s.ok() ? 0 : 2;
  }
  const Registry registry = make_default_registry();
  const bool md = args.has("markdown");
  if (!md) {
    std::printf("mlakit %s (%s)\n", version(), build_info().c_str());
    std::unique_ptr<DeviceMemory> gpu;
    const Status why = make_cuda_memory(&gpu);
    std::printf("gpu: %s\n", gpu ? device_name(gpu->device()).c_str() : why.message().c_str());
    std::printf("context-parallel decode (ContextParallelDecode over NCCL): %s\n", nccl_build_info().c_str());
    std::printf("\nbackends (automatic selection prefers higher priority):\n");
    for (const Backend* b : registry.list()) {
      const Status avail = b->available();
      std::printf("  %-10s priority %-3d %s\n             %s\n", b->name().c_str(), b->priority(),
                  avail.ok() ? "available" : ("unavailable: " + avail.message()).c_str(), b->description().c_str());
    }
    std::printf("\nsupport matrix:\n");
  }
  // One row per operation, one column per backend: the backend's own feature text, or "-".
  std::printf(md ? "| operation |" : "  %-14s", md ? "" : "operation");
  for (const Backend* b : registry.list()) std::printf(md ? " %s |" : " | %s", b->name().c_str());
  std::printf("\n");
  if (md) {
    std::printf("|---|");
    for (size_t i = 0; i < registry.list().size(); ++i) std::printf("---|");
    std::printf("\n");
  }
  for (OpKind op : kAllOps) {
    std::printf(md ? "| %s |" : "  %-14s", op_name(op));
    for (const Backend* b : registry.list()) {
      std::string cell = "-";
      for (const Feature& f : b->features()) {
        if (f.op == op) cell = (cell == "-" ? "" : cell + "; ") + f.detail;
      }
      std::string text;  // in Markdown a '|' inside a cell would end it: escape it
      for (char ch : cell) text += md && ch == '|' ? std::string("\\|") : std::string(1, ch);
      std::printf(md ? " %s |" : " | %s", text.c_str());
    }
    std::printf("\n");
  }
  return 0;
}

}  // namespace mlakit::cli
