#pragma once
// The online-softmax row update both prefill kernels run per key tile (log2 domain). A thread holds two rows (the
// mma and wgmma accumulator layouts); each row's values are spread over the four lanes of a quad.

namespace mlakit::cuda::prefill {

/// mx: this thread's maxima of the tile's (scaled, masked) scores of its two rows. Reduces them over the quad,
/// advances the running maxima m, scales the running sums l, and returns in alpha the factor that rescales O and
/// in m_use the maximum to subtract before exp2 (0 while a row has seen no key, so that p = 0 and not NaN).
__device__ __forceinline__ void advance_rows(float (&mx)[2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                             float (&m_use)[2]) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 1));
    mx[e] = fmaxf(mx[e], __shfl_xor_sync(0xffffffffu, mx[e], 2));
    const float m_new = fmaxf(m[e], mx[e]);
    m_use[e] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[e] = exp2f(m[e] - m_use[e]);
    m[e] = m_new;
    l[e] *= alpha[e];
  }
}

}  // namespace mlakit::cuda::prefill
