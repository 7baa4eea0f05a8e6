#pragma once
// Facts about a CUDA device that backends need on the host, and a guard that makes a call's device current.

#include "mlakit/backend.h"
#include "mlakit/status.h"
#include "mlakit/types.h"

namespace mlakit::cuda {

struct DeviceInfo {
  int ordinal = -1;
  int sm_major = 0;
  int sm_minor = 0;
  int num_sms = 0;
  int max_smem_per_block_optin = 0;  // bytes
};

/// What a CUDA backend's available() answers: available_on() for the calling thread's current device, or "no CUDA
/// device found" when the process sees none.
Status available_on_current_device(const Backend& backend);

/// Information on device `ordinal` (the index of the call's tensors' Device), queried once per (host thread, device)
/// and kept for the thread's life: a device's compute capability, SM count and shared-memory limit cannot change
/// while the process lives, and every public call of a CUDA backend asks for them (availability, supports, plan and
/// run), where five runtime queries per call cost microseconds of host time. Keyed by the ordinal, never by the
/// current device, so that a call on another GPU than the current one is checked and sized for its own GPU.
/// *info stays valid for the calling thread's life (the entries never move). Not cached: a missing device (an
/// ordinal at or past the device count; the next call asks again).
Status cached_device_info(int ordinal, const DeviceInfo** info);

/// Lets `kernel` (a __global__ function) launch with `bytes` of dynamic shared memory on the current device:
/// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) once per (host thread, device, kernel), as the setting lasts for
/// the process on that device and the call costs ~0.4 us of host time, where every decode and prefill launch set it.
/// (A cudaDeviceReset() drops the setting with the context while this record keeps it: a process that resets a device
/// and then calls MLAKit again on it from the same thread gets a launch error, not a wrong result.)
Status allow_dynamic_smem(const void* kernel, int bytes);

/// Makes `device` current for the guard's lifetime (kernels launch on the problem's device, not on
/// whatever device the calling thread last used); restores the previous device afterwards.
class DeviceGuard {
 public:
  DeviceGuard() = default;
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;
  ~DeviceGuard();
  Status set(Device device);

 private:
  int previous_ = -1;
};

}  // namespace mlakit::cuda
