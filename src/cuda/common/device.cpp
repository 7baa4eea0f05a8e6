#include "cuda/common/device.h"

#include <deque>

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

Status cached_device_info(const DeviceInfo** out) {
  thread_local std::deque<DeviceInfo> known;  // indexed by ordinal (growing it moves no entry); -1 = not yet asked
  int ordinal = -1;
  if (cudaGetDevice(&ordinal) == cudaSuccess && ordinal >= 0 && size_t(ordinal) < known.size() &&
      known[size_t(ordinal)].ordinal == ordinal) {
    *out = &known[size_t(ordinal)];
    return {};
  }
  DeviceInfo info;
  MLAKIT_TRY(current_device_info(&info));
  if (known.size() <= size_t(info.ordinal)) known.resize(size_t(info.ordinal) + 1);
  known[size_t(info.ordinal)] = info;
  *out = &known[size_t(info.ordinal)];
  return {};
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

Status DeviceGuard::set(Device device) {
  int current = 0;
  MLAKIT_CUDA_TRY(cudaGetDevice(&current));
  if (current == device.index) return {};
  MLAKIT_CUDA_TRY(cudaSetDevice(device.index));
  previous_ = current;
  return {};
}

}  // namespace mlakit::cuda
