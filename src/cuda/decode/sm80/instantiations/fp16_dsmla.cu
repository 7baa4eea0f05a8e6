// Dense decode kernels for q in fp16 with a dsmla cache (all three row-group counts).
#include "cuda/decode/sm80/launch_decode.cuh"

namespace mlakit::cuda::decode {
template Status decode_kernel_launch<false, KvKind::kDsMla, false>(const DecodeParams&, int, int, bool, KernelLaunch*);
template Status decode_occupancy<false, KvKind::kDsMla, false>(int, int*);
}  // namespace mlakit::cuda::decode
