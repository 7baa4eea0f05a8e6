// Stands in for launch_sm90.cu when the build has no sm_90a code: the launcher says why (the backend's available()
// fails first, so it is not reached through the registry).
#include "cuda/prefill/sm90/launch.h"

namespace mlakit::cuda::prefill::sm90 {

template <bool kBf16, int kDQK, int kDV>
Status launch_prefill(const PrefillParams&, const CUtensorMap&, const CUtensorMap&, const CUtensorMap&, int64_t, int, int,
                      cudaStream_t) {
  return Status::not_supported("this build has no sm_90a code (configure with MLAKIT_CUDA_ARCHS holding 90a)");
}
#define MLAKIT_INSTANTIATE(bf16, dqk, dv)                                                                      \
  template Status launch_prefill<bf16, dqk, dv>(const PrefillParams&, const CUtensorMap&, const CUtensorMap&, \
                                                const CUtensorMap&, int64_t, int, int, cudaStream_t);
MLAKIT_PREFILL_SM90_KERNELS(MLAKIT_INSTANTIATE)
#undef MLAKIT_INSTANTIATE

}  // namespace mlakit::cuda::prefill::sm90
