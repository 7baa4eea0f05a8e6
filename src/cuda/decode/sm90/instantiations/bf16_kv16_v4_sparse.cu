// Hopper sparse decode kernel in DeepSeek V4's geometry (d_qk 512, V the whole row), q in bf16, bf16 cache.
#include "cuda/decode/sm90/launch_kernel.cuh"

namespace mlakit::cuda::decode::sm90 {
template Status decode_kernel_launch<true, KvKind::k16Bit, true, kDimQKV4>(const DecodeParams&, const CUtensorMap&, const int*,
                                                                  int, bool, KernelLaunch*);
}  // namespace mlakit::cuda::decode::sm90
