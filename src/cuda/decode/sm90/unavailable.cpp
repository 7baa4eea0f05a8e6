// Stands in for instantiations/ when the build has no sm_90a code: the Hopper path reports why it cannot
// run, and its launcher is never reached (the backend's available() fails first).
#include "cuda/decode/sm90/launch.h"

namespace mlakit::cuda::decode::sm90 {

template <bool kBf16, bool kSparse>
Status launch_decode_kernel(const DecodeParams&, const CUtensorMap&, bool, int, cudaStream_t, bool) {
  return kernels_loadable();
}
template Status launch_decode_kernel<true, false>(const DecodeParams&, const CUtensorMap&, bool, int, cudaStream_t, bool);
template Status launch_decode_kernel<false, false>(const DecodeParams&, const CUtensorMap&, bool, int, cudaStream_t, bool);
template Status launch_decode_kernel<true, true>(const DecodeParams&, const CUtensorMap&, bool, int, cudaStream_t, bool);
template Status launch_decode_kernel<false, true>(const DecodeParams&, const CUtensorMap&, bool, int, cudaStream_t, bool);

Status kernels_loadable() {
  return Status::not_supported("this build has no sm_90a code (configure with MLAKIT_CUDA_ARCHS holding 90a)");
}

}  // namespace mlakit::cuda::decode::sm90
