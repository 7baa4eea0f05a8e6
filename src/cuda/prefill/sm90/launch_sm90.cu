// The Hopper prefill kernel's launcher and its instantiations (built for sm_90a only).

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/prefill/sm90/kernel.cuh"
#include "cuda/prefill/sm90/launch.h"

namespace mlakit::cuda::prefill::sm90 {

static_assert(kLaunchBlockM == kBlockM);
static_assert(kTmaBoxRows == kBoxRows && kTmaBoxRows == kRowsPerConsumer && kBlockN % kTmaBoxRows == 0);

namespace {

/// One form of the kernel (launch.h: persistent or one CTA per block) on `grid`, with the shared memory that form uses.
template <bool kBf16, int kDQK, int kDV, bool kPersistent>
Status launch_form(const PrefillParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map, const CUtensorMap& v_map,
                   dim3 grid, int64_t slots, int h_q, cudaStream_t stream) {
  constexpr int kSmem = Layout<kDQK, kDV>::template alloc<kPersistent>;
  auto kernel = prefill_kernel<kBf16, kDQK, kDV, kPersistent>;
  MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem));
  kernel<<<grid, kThreads, kSmem, stream>>>(p, q_map, k_map, v_map, slots, h_q);
  MLAKIT_CUDA_TRY_LAUNCH("prefill_kernel (sm90)");
  return {};
}

}  // namespace

template <bool kBf16, int kDQK, int kDV>
Status launch_prefill(const PrefillParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                      const CUtensorMap& v_map, int64_t slots, int h_q, int persistent_ctas, cudaStream_t stream) {
  if (persistent_ctas > 0) {
    return launch_form<kBf16, kDQK, kDV, true>(p, q_map, k_map, v_map, dim3(unsigned(persistent_ctas)), slots, h_q,
                                                stream);
  }
  return launch_form<kBf16, kDQK, kDV, false>(p, q_map, k_map, v_map, dim3(unsigned(slots), unsigned(h_q)), slots, h_q,
                                               stream);
}

#define MLAKIT_INSTANTIATE(bf16, dqk, dv)                                                                      \
  template Status launch_prefill<bf16, dqk, dv>(const PrefillParams&, const CUtensorMap&, const CUtensorMap&, \
                                                const CUtensorMap&, int64_t, int, int, cudaStream_t);
MLAKIT_PREFILL_SM90_KERNELS(MLAKIT_INSTANTIATE)
#undef MLAKIT_INSTANTIATE

}  // namespace mlakit::cuda::prefill::sm90
