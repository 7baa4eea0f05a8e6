#pragma once
// Facts about the current CUDA device that backends need on the host (cached per call, not globally).

#include "mlakit/status.h"

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

}  // namespace mlakit::cuda
