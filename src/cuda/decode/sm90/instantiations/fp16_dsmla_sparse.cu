// Hopper sparse decode kernel, q in fp16, fp8_ds_mla cache.
#include "cuda/decode/sm90/launch_kernel.cuh"

namespace mlakit::cuda::decode::sm90 {
template Status decode_kernel_launch<false, KvKind::kDsMla, true, kDimQK>(const DecodeParams&, const CUtensorMap&, const int*,
                                                                  int, bool, KernelLaunch*);
}  // namespace mlakit::cuda::decode::sm90
