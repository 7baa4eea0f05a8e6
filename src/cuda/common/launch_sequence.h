#pragma once
// Kernel launches held as data, so that an eager call can replay them as one CUDA graph: on the GPU machines' hosts a
// cudaLaunchKernelEx costs 2.7 - 3.9 us of host time, a captured graph's replay with new arguments 1.9 us for two
// kernels (docs/performance.md, "What a dense call's host time is made of"), and a decode call makes two launches
// (decode kernel, combine). Also the launch configuration with programmatic dependent launch (PdlLaunch) that the
// decode kernels use.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <type_traits>

#include "mlakit/status.h"

namespace mlakit::cuda {

/// A cudaLaunchConfig_t with the PDL attribute set when `pdl` (sm_90+): the kernel may start while the
/// previous one in the stream finishes, and waits for it in pdl_wait(). Not copyable: cfg points at attr.
struct PdlLaunch {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[2]{};
  /// `cluster_x` > 1: clusters of that many CTAs along x (the Hopper kernel's CTA pairs; grid.x a multiple of it).
  PdlLaunch(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, bool pdl, unsigned cluster_x = 1) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.stream = stream;
    cfg.attrs = attr;
    if (pdl) {
      attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
      ++cfg.numAttrs;
    }
    if (cluster_x > 1) {
      attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
      attr[cfg.numAttrs].val.clusterDim.x = cluster_x;
      attr[cfg.numAttrs].val.clusterDim.y = 1;
      attr[cfg.numAttrs].val.clusterDim.z = 1;
      ++cfg.numAttrs;
    }
  }
  PdlLaunch(const PdlLaunch&) = delete;
  PdlLaunch& operator=(const PdlLaunch&) = delete;
};

/// One kernel launch: `args` point at the argument values (one per kernel parameter, as cudaLaunchKernelExC takes
/// them), which must stay alive until launch_sequence returns. Set func and args with set_kernel, which checks them
/// against the kernel's parameter types.
struct KernelLaunch {
  static constexpr int kMaxArgs = 4;
  const void* func = nullptr;  // the __global__ function
  dim3 grid;
  dim3 block;
  size_t smem = 0;  // dynamic shared memory, bytes (the caller has allowed it: allow_dynamic_smem)
  void* args[kMaxArgs] = {};
  bool pdl = false;        // programmatic dependent launch on the previous kernel of the stream (or of the sequence)
  unsigned cluster_x = 1;  // > 1: clusters of that many CTAs along x
};

/// `kernel` and pointers to its arguments into `l`: one pointer per parameter, each to a value of that parameter's type
/// (cv-qualifiers aside), checked at compile time as a <<<>>> launch or cudaLaunchKernelEx would. Pointers rather than
/// references, so that no temporary can be bound: the values must outlive the launch.
template <typename... Params, typename... Args>
void set_kernel(KernelLaunch& l, void (*kernel)(Params...), const Args*... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "one argument per kernel parameter");
  static_assert(sizeof...(Args) <= KernelLaunch::kMaxArgs, "more arguments than a KernelLaunch holds");
  static_assert((std::is_same_v<std::remove_cv_t<Params>, Args> && ...), "argument types must be the kernel's");
  l.func = reinterpret_cast<const void*>(kernel);
  int i = 0;
  ((l.args[i++] = const_cast<Args*>(args)), ...);
}

/// Launches `n` kernels on `stream`, in order, with the configuration each names. On a stream that is being captured
/// (the caller's own CUDA graph) each is a plain launch, so the caller's graph holds the kernels; so is a single
/// kernel. Otherwise the sequence runs as a CUDA graph instantiated once per (host thread, device, stream, sequence of
/// functions and launch attributes) and replayed with each call's grids and arguments; a thread keeps the last
/// kMaxReplays of them. Keyed by stream, a replay orders nothing across streams that plain launches would not
/// (launches of one instantiated graph are serialised). The device must be current (DeviceGuard). The functions of
/// one sequence must differ (each graph node is found by its function). When the cache's own graph calls fail (a
/// runtime that maps nodes differently, memory short for an instantiation), the call launches plainly and the error is
/// not left for a later launch check: a sequence whose capture failed is launched plainly by that thread until its
/// entry is replaced, and a graph whose update or launch failed is dropped with the capture stream, so the next call
/// captures anew. (A device reset is not supported for a thread that made such calls: docs/backends.md.)
Status launch_sequence(const KernelLaunch* launches, int n, cudaStream_t stream);

/// Graphs a host thread keeps for replay (least recently used one replaced).
inline constexpr int kMaxReplays = 16;

/// Instantiated graphs the calling thread keeps now (tests: whether a sequence was replayed or launched plainly).
int replays_kept_by_this_thread();

}  // namespace mlakit::cuda
