#pragma once
// The online-softmax steps every attention kernel shares (log2 domain: scores are pre-multiplied by log2(e) / sqrt(d),
// so exp2 gives the weights). A thread holds two rows of the mma.sync and wgmma accumulator layouts, and each row's
// values are spread over the four lanes of a quad, so every row statistic is reduced over the quad first.

namespace mlakit::cuda {

/// ln(2): a base-2 log-sum-exp times it is the natural-log lse the kernels report.
inline constexpr float kLn2 = 0.6931471805599453f;

/// 2^x, a result below 2^-126 flushed to zero: one MUFU.EX2. exp2f without fast-math wraps it in a range test and two
/// multiplies to produce subnormal results, which a softmax weight cannot use: every row sum holds the weight of the
/// row's maximum, 1 (2^d with |d| within half an ulp of m where the maximum is taken over raw scores and scaled
/// once, so about 1 for any logit below ~2^30). Not volatile: the compiler may schedule it like any arithmetic.
__device__ __forceinline__ float exp2_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

/// x: this thread's partial maxima of its two rows; on return each holds the row's maximum over the quad.
__device__ __forceinline__ void reduce_row_maxima(float (&x)[2]) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    x[e] = fmaxf(x[e], __shfl_xor_sync(0xffffffffu, x[e], 1));
    x[e] = fmaxf(x[e], __shfl_xor_sync(0xffffffffu, x[e], 2));
  }
}

/// l: this thread's partial sums of its two rows; on return each holds the row's sum over the quad (every lane of
/// the warp takes part).
__device__ __forceinline__ void reduce_row_sums(float (&l)[2]) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 1);
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 2);
  }
}

/// mx: this thread's maxima of the tile's (scaled, masked) scores of its two rows. Reduces them over the quad,
/// advances the running maxima m, scales the running sums l, and returns in alpha the factor that rescales O and
/// in m_use the maximum to subtract before exp2 (0 while a row has seen no key, so that p = 0 and not NaN).
__device__ __forceinline__ void advance_rows(float (&mx)[2], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                             float (&m_use)[2]) {
  reduce_row_maxima(mx);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const float m_new = fmaxf(m[e], mx[e]);
    m_use[e] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[e] = exp2f(m[e] - m_use[e]);
    m[e] = m_new;
    l[e] *= alpha[e];
  }
}

}  // namespace mlakit::cuda
