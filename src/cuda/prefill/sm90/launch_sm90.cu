// The Hopper prefill kernel's launcher and its instantiations (built for sm_90a only).

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/prefill/sm90/kernel.cuh"
#include "cuda/prefill/sm90/launch.h"

namespace mlakit::cuda::prefill::sm90 {

static_assert(kLaunchBlockM == kBlockM);
static_assert(kTmaBoxRows == kBoxRows && kTmaBoxRows == kRowsPerConsumer && kBlockN % kTmaBoxRows == 0);

template <bool kBf16, int kDQK, int kDV>
Status launch_prefill(const PrefillParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                      const CUtensorMap& v_map, int64_t slots, int h_q, int persistent_ctas, cudaStream_t stream) {
  if (persistent_ctas > 0) {
    constexpr int kSmem = Layout<kDQK, kDV>::template alloc<true>;
    auto kernel = prefill_kernel<kBf16, kDQK, kDV, true>;
    MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem));
    kernel<<<dim3(unsigned(persistent_ctas)), kThreads, kSmem, stream>>>(p, q_map, k_map, v_map, slots, h_q);
  } else {
    constexpr int kSmem = Layout<kDQK, kDV>::template alloc<false>;
    auto kernel = prefill_kernel<kBf16, kDQK, kDV, false>;
    MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem));
    kernel<<<dim3(unsigned(slots), unsigned(h_q)), kThreads, kSmem, stream>>>(p, q_map, k_map, v_map, slots, h_q);
  }
  MLAKIT_CUDA_TRY_LAUNCH("prefill_kernel (sm90)");
  return {};
}

#define MLAKIT_INSTANTIATE(bf16, dqk, dv)                                                                      \
  template Status launch_prefill<bf16, dqk, dv>(const PrefillParams&, const CUtensorMap&, const CUtensorMap&, \
                                                const CUtensorMap&, int64_t, int, int, cudaStream_t);
MLAKIT_PREFILL_SM90_KERNELS(MLAKIT_INSTANTIATE)
#undef MLAKIT_INSTANTIATE

}  // namespace mlakit::cuda::prefill::sm90
