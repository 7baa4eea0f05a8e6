#include "cuda/common/device.h"

#include "cuda/common/check.h"

namespace mlakit::cuda {

Status current_device_info(DeviceInfo* info) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return Status::not_supported("no CUDA device found");
  }
  MLAKIT_CUDA_TRY(cudaGetDevice(&info->ordinal));
  MLAKIT_CUDA_TRY(cudaDeviceGetAttribute(&info->sm_major, cudaDevAttrComputeCapabilityMajor, info->ordinal));
  MLAKIT_CUDA_TRY(cudaDeviceGetAttribute(&info->sm_minor, cudaDevAttrComputeCapabilityMinor, info->ordinal));
  MLAKIT_CUDA_TRY(cudaDeviceGetAttribute(&info->num_sms, cudaDevAttrMultiProcessorCount, info->ordinal));
  MLAKIT_CUDA_TRY(cudaDeviceGetAttribute(&info->max_smem_per_block_optin,
                                         cudaDevAttrMaxSharedMemoryPerBlockOptin, info->ordinal));
  return {};
}

}  // namespace mlakit::cuda
