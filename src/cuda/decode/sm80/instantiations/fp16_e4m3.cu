// Dense decode kernels for q in fp16 with a e4m3 cache (all three row-group counts).
#include "cuda/decode/sm80/launch_decode.cuh"

namespace mlakit::cuda::decode {
template Status launch_decode_kernel<false, KvKind::kE4M3, false>(const DecodeParams&, int, int, cudaStream_t, bool);
template Status decode_occupancy<false, KvKind::kE4M3, false>(int, int*);
}  // namespace mlakit::cuda::decode
