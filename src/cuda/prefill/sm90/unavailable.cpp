// Stands in for launch_sm90.cu when the build has no sm_90a code: the launcher says why (the backend's available()
// fails first, so it is not reached through the registry).
#include "cuda/prefill/sm90/launch.h"

namespace mlakit::cuda::prefill::sm90 {

template <bool kBf16, int kDQK, int kDV>
Status launch_prefill(const PrefillParams&, const CUtensorMap&, const CUtensorMap&, const CUtensorMap&, int64_t, int,
                      cudaStream_t) {
  return Status::not_supported("this build has no sm_90a code (configure with MLAKIT_CUDA_ARCHS holding 90a)");
}
template Status launch_prefill<true, 192, 128>(const PrefillParams&, const CUtensorMap&, const CUtensorMap&,
                                               const CUtensorMap&, int64_t, int, cudaStream_t);
template Status launch_prefill<false, 192, 128>(const PrefillParams&, const CUtensorMap&, const CUtensorMap&,
                                                const CUtensorMap&, int64_t, int, cudaStream_t);
template Status launch_prefill<true, 128, 128>(const PrefillParams&, const CUtensorMap&, const CUtensorMap&,
                                               const CUtensorMap&, int64_t, int, cudaStream_t);
template Status launch_prefill<false, 128, 128>(const PrefillParams&, const CUtensorMap&, const CUtensorMap&,
                                                const CUtensorMap&, int64_t, int, cudaStream_t);

}  // namespace mlakit::cuda::prefill::sm90
