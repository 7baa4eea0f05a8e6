// Sparse decode kernels for q in fp16 with a kv16 cache (all three row-group counts).
#include "cuda/decode/sm80/launch_decode.cuh"

namespace mlakit::cuda::decode {
template Status decode_kernel_launch<false, KvKind::k16Bit, true>(const DecodeParams&, int, int, bool, KernelLaunch*);
template Status decode_occupancy<false, KvKind::k16Bit, true>(int, int*);
}  // namespace mlakit::cuda::decode
