#pragma once
// Facts about the current CUDA device that backends need on the host, and a guard that makes a call's device current.

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

/// Information on the current device, or a Status saying why there is none.
Status current_device_info(DeviceInfo* info);

/// The same, queried once per (host thread, device) and kept for the thread's life: a device's compute capability,
/// SM count and shared-memory limit cannot change while the process lives, and every public call of a CUDA backend
/// asks for them (available()), where six runtime queries per call cost microseconds of host time. *info stays valid
/// for the calling thread's life (the entries never move). Not cached: the absence of a device (the next call asks
/// again).
Status cached_device_info(const DeviceInfo** info);

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
