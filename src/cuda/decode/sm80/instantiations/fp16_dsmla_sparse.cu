// Sparse decode kernels for q in fp16 with a dsmla cache (all three row-group counts).
#include "cuda/decode/sm80/launch_decode.cuh"

namespace mlakit::cuda::decode {
template Status decode_kernel_launch<false, KvKind::kDsMla, true>(const DecodeParams&, int, int, bool, KernelLaunch*);
template Status decode_occupancy<false, KvKind::kDsMla, true>(int, int*);
}  // namespace mlakit::cuda::decode
