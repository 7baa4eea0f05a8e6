// Hopper sparse decode kernel, q and cache in bf16.
#include "cuda/decode/sm90/launch_kernel.cuh"

namespace mlakit::cuda::decode::sm90 {
template Status decode_kernel_launch<true, KvKind::k16Bit, true, kDimQK>(const DecodeParams&, const CUtensorMap&, const int*,
                                                                  int, bool, KernelLaunch*);
}  // namespace mlakit::cuda::decode::sm90
