#pragma once
// A call's kernel launches held as data, so that an eager call can replay them as one CUDA graph: on the GPU
// machines' hosts a cudaLaunchKernelEx costs 2.7 - 3.9 us of host time, a captured graph's replay with new arguments
// 1.9 us for two kernels (docs/performance.md, "What a dense call's host time is made of"), and a dense decode makes
// two launches (decode kernel, combine).

#include <cuda_runtime_api.h>

#include <cstddef>

#include "mlakit/status.h"

namespace mlakit::cuda {

/// One kernel launch: `args` point at the argument values (one per kernel parameter, as cudaLaunchKernelExC takes
/// them), which must stay alive until launch_sequence returns.
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

/// Launches `n` kernels on `stream`, in order, with the configuration each names. On a stream that is being captured
/// (the caller's own CUDA graph) each is a plain launch, so the caller's graph holds the kernels; so is a single
/// kernel. Otherwise the sequence runs as a CUDA graph instantiated once per (host thread, device, stream, sequence of functions and launch
/// attributes) and replayed with each call's grids and arguments; a thread keeps the last kMaxReplays of them.
/// Keyed by stream, a replay orders nothing across streams that plain launches would not (launches of one
/// instantiated graph are serialised). The device must be current (DeviceGuard). The functions of one sequence must
/// differ (each graph node is found by its function).
Status launch_sequence(const KernelLaunch* launches, int n, cudaStream_t stream);

/// One plain launch (cudaLaunchKernelExC), for a kernel that launches alone.
Status launch_now(const KernelLaunch& launch, cudaStream_t stream);

/// Graphs a host thread keeps for replay (least recently used one replaced).
inline constexpr int kMaxReplays = 16;

}  // namespace mlakit::cuda
