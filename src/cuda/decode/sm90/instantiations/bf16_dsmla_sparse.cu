// Hopper sparse decode kernel, q in bf16, fp8_ds_mla cache.
#include "cuda/decode/sm90/launch_kernel.cuh"

namespace mlakit::cuda::decode::sm90 {
template Status launch_decode_kernel<true, KvKind::kDsMla, true, kDimQK>(const DecodeParams&, const CUtensorMap&, bool,
                                                                 int, cudaStream_t, bool);
}  // namespace mlakit::cuda::decode::sm90
