#pragma once
// Facts about a CUDA device that backends need on the host, and a guard that makes a call's device current.

#include "mlakit/status.h"
#include "mlakit/types.h"

namespace mlakit {
class Backend;
}  // namespace mlakit

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
/// cudaFuncSetAttribute(MaxDynamicSharedMemorySize) once per (host thread, device, kernel), where every decode and
/// prefill launch set it (0.23 - 0.43 us of host time each on the GPU machines' hosts). The setting belongs to the
/// device's primary context, the one the runtime API uses, and lasts as long as it does. Two consequences, both a
/// launch error rather than a wrong result: after a cudaDeviceReset(), calls on that device from a thread that launched
/// there before the reset find the setting gone; and a caller who makes another (driver API) context current on a device
/// gets launches there without it once this thread has set it in the primary context.
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
