// Hopper sparse decode kernel, q and cache in fp16.
#include "cuda/decode/sm90/launch_kernel.cuh"

namespace mlakit::cuda::decode::sm90 {
template Status launch_decode_kernel<false, KvKind::k16Bit, true, kDimQK>(const DecodeParams&, const CUtensorMap&, bool,
                                                                  int, cudaStream_t, bool);
}  // namespace mlakit::cuda::decode::sm90
