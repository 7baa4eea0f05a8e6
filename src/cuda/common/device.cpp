#include "cuda/common/device.h"

#include <deque>
#include <string>

#include "cuda/common/check.h"

namespace mlakit::cuda {
namespace {

Status query_device_info(int ordinal, DeviceInfo* info) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();  // clear the sticky "no device" error so later calls start clean
    return Status::not_supported("no CUDA device found");
  }
  if (ordinal < 0 || ordinal >= count) {
    return Status::not_supported("cuda:" + std::to_string(ordinal) + ": no such CUDA device (this process sees " +
                                 std::to_string(count) + ")");
  }
  info->ordinal = ordinal;
  MLAKIT_CUDA_TRY(cudaDeviceGetAttribute(&info->sm_major, cudaDevAttrComputeCapabilityMajor, ordinal));
  MLAKIT_CUDA_TRY(cudaDeviceGetAttribute(&info->sm_minor, cudaDevAttrComputeCapabilityMinor, ordinal));
  MLAKIT_CUDA_TRY(cudaDeviceGetAttribute(&info->num_sms, cudaDevAttrMultiProcessorCount, ordinal));
  MLAKIT_CUDA_TRY(cudaDeviceGetAttribute(&info->max_smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin,
                                         ordinal));
  return {};
}

}  // namespace

Status current_device(int* ordinal) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    cudaGetLastError();
    return Status::not_supported("no CUDA device found");
  }
  MLAKIT_CUDA_TRY(cudaGetDevice(ordinal));
  return {};
}

Status cached_device_info(int ordinal, const DeviceInfo** out) {
  thread_local std::deque<DeviceInfo> known;  // indexed by ordinal (growing it moves no entry); -1 = not yet asked
  if (ordinal >= 0 && size_t(ordinal) < known.size() && known[size_t(ordinal)].ordinal == ordinal) {
    *out = &known[size_t(ordinal)];
    return {};
  }
  DeviceInfo info;
  MLAKIT_TRY(query_device_info(ordinal, &info));
  if (known.size() <= size_t(ordinal)) known.resize(size_t(ordinal) + 1);
  known[size_t(ordinal)] = info;
  *out = &known[size_t(ordinal)];
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
