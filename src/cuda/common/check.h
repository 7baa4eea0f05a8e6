#pragma once
// CUDA error handling as Status: every runtime call and every launch is checked, never aborts.

#include <cuda_runtime_api.h>

#include <string>

#include "mlakit/status.h"

namespace mlakit::cuda {

/// "cudaMalloc failed: out of memory (cudaErrorMemoryAllocation) at file:line".
inline Status cuda_status(cudaError_t err, const char* what, const char* file, int line) {
  if (err == cudaSuccess) return {};
  return Status::cuda_error(std::string(what) + " failed: " + cudaGetErrorString(err) + " (" +
                            cudaGetErrorName(err) + ") at " + file + ":" + std::to_string(line));
}

}  // namespace mlakit::cuda

/// Returns a kCudaError Status from the enclosing function when the runtime call fails.
#define MLAKIT_CUDA_TRY(call) MLAKIT_TRY(::mlakit::cuda::cuda_status((call), #call, __FILE__, __LINE__))
/// Checks the last launch (configuration errors surface here, not in the <<<>>> statement).
#define MLAKIT_CUDA_TRY_LAUNCH(name) \
  MLAKIT_TRY(::mlakit::cuda::cuda_status(cudaGetLastError(), "launch of " name, __FILE__, __LINE__))
