#include "cuda/common/device.h"

#include <deque>
#include <string>
#include <vector>

#include "cuda/common/check.h"
#include "mlakit/backend.h"

namespace mlakit::cuda {
namespace {

// The number of devices this process sees; "no CUDA device found" when there is none (no GPU, or CUDA_VISIBLE_DEVICES
// empty), with the runtime's reason when it could not count them (no driver, a driver older than the runtime), so
// that every caller words it the same way.
Status device_count(int* count) {
  const cudaError_t e = cudaGetDeviceCount(count);
  cudaGetLastError();  // clear the error so later calls start clean
  if (e == cudaErrorNoDevice || (e == cudaSuccess && *count == 0)) return Status::not_supported("no CUDA device found");
  if (e != cudaSuccess) return Status::not_supported(std::string("no CUDA device found (") + cudaGetErrorString(e) + ")");
  return {};
}

Status query_device_info(int ordinal, DeviceInfo* info) {
  int count = 0;
  MLAKIT_TRY(device_count(&count));
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

Status current_device(int* ordinal) {
  int count = 0;
  MLAKIT_TRY(device_count(&count));
  MLAKIT_CUDA_TRY(cudaGetDevice(ordinal));
  return {};
}

}  // namespace

Status available_on_current_device(const Backend& backend) {
  int ordinal = 0;
  MLAKIT_TRY(current_device(&ordinal));
  return backend.available_on(Device::cuda(ordinal));
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

Status allow_dynamic_smem(const void* kernel, int bytes) {
  struct Allowed {
    int device;
    const void* kernel;
    int bytes;
  };
  thread_local std::vector<Allowed> allowed;  // tens of entries at most: one per (device, kernel instantiation)
  int device = 0;
  MLAKIT_CUDA_TRY(cudaGetDevice(&device));
  for (const Allowed& a : allowed) {
    if (a.device == device && a.kernel == kernel && a.bytes >= bytes) return {};
  }
  if (const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
      e != cudaSuccess) {
    cudaGetLastError();  // not left for the next launch check of this thread to report as its own
    return cuda_status(e, "cudaFuncSetAttribute(MaxDynamicSharedMemorySize)", __FILE__, __LINE__);
  }
  allowed.push_back({device, kernel, bytes});
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
