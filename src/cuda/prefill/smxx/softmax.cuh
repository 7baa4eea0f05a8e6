#pragma once
// The online softmax both prefill kernels run (log2 domain): the row update per key tile, and the rows' output at
// the end. A thread holds two rows (the mma and wgmma accumulator layouts); each row's values are spread over the
// four lanes of a quad.

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/prefill/smxx/params.h"

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

/// The final row sums: each row's partial sums reduced over its quad (every lane of the warp takes part).
__device__ __forceinline__ void reduce_row_sums(float (&l)[2]) {
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 1);
    l[e] += __shfl_xor_sync(0xffffffffu, l[e], 2);
  }
}

/// A row of this thread, query `token`, head h, with its reduced sum l: out = O / l (0 for a row that saw no key)
/// and lse = ln(sum of exp) (-inf then), the lse written by the quad's first lane. o(j, c) is the row's O element
/// of column 8 j + 2 tig + c.
template <bool kBf16, int kDV, class RowO>
__device__ __forceinline__ void store_row(const PrefillParams& p, const RowO& o, float m, float l, int64_t token, int h,
                                          int tig) {
  const bool empty = !(l > 0.0f);
  const float inv = empty ? 0.0f : 1.0f / l;
  uint8_t* orow = p.out + (token * p.out_stride_t + int64_t(h) * p.out_stride_h) * 2;
#pragma unroll
  for (int nt = 0; nt < kDV / 8; ++nt) {
    *reinterpret_cast<uint32_t*>(orow + (nt * 8 + 2 * tig) * 2) = pack_float2<kBf16>(o(nt, 0) * inv, o(nt, 1) * inv);
  }
  if (p.lse != nullptr && tig == 0) {
    p.lse[token * p.lse_stride_t + int64_t(h) * p.lse_stride_h] = empty ? -INFINITY : (m + log2f(l)) * 0.69314718f;
  }
}

}  // namespace mlakit::cuda::prefill
