// Sparse decode kernels for q in bf16 with a kv16 cache in DeepSeek V4's geometry (d_qk 512, V the whole row).
#include "cuda/decode/sm80/launch_decode.cuh"

namespace mlakit::cuda::decode {
template Status decode_kernel_launch<true, KvKind::k16Bit, true, kDimQKV4>(const DecodeParams&, int, int, bool, KernelLaunch*);
template Status decode_occupancy<true, KvKind::k16Bit, true, kDimQKV4>(int, int*);
}  // namespace mlakit::cuda::decode
