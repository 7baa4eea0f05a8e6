// Hopper sparse decode kernel in DeepSeek V4's geometry (d_qk 512, V the whole row), q in bf16, bf16 cache.
#include "cuda/decode/sm90/launch_kernel.cuh"

namespace mlakit::cuda::decode::sm90 {
template Status launch_decode_kernel<true, KvKind::k16Bit, true, kDimQKV4>(const DecodeParams&, const CUtensorMap&,
                                                                          bool, int, cudaStream_t, bool);
}  // namespace mlakit::cuda::decode::sm90
