// Dense decode kernels for q in bf16 with a e4m3 cache (all three row-group counts).
#include "cuda/decode/sm80/launch_decode.cuh"

namespace mlakit::cuda::decode {
template Status decode_kernel_launch<true, KvKind::kE4M3, false>(const DecodeParams&, int, int, bool, KernelLaunch*);
template Status decode_occupancy<true, KvKind::kE4M3, false>(int, int*);
}  // namespace mlakit::cuda::decode
