// Dense decode kernels for q in bf16 with a dsmla cache (all three row-group counts).
#include "cuda/decode/sm80/launch_decode.cuh"

namespace mlakit::cuda::decode {
template Status decode_kernel_launch<true, KvKind::kDsMla, false>(const DecodeParams&, int, int, bool, KernelLaunch*);
template Status decode_occupancy<true, KvKind::kDsMla, false>(int, int*);
}  // namespace mlakit::cuda::decode
