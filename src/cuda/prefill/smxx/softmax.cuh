#pragma once
// The end of the online softmax both prefill kernels run: a row's output and lse. The row update per key tile
// (advance_rows, reduce_row_sums) is cuda/common/online_softmax.cuh, shared with the decode kernels.

#include <cstdint>

#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/prefill/smxx/params.h"

namespace mlakit::cuda::prefill {

/// The factor of a row's output with reduced sum l: 1 / l, or 0 for a row that saw no key (out = 0).
__device__ __forceinline__ float row_out_factor(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }

/// A row's lse = ln(sum of exp) (-inf for a row that saw no key), written by the quad's first lane (tig 0).
__device__ __forceinline__ void store_row_lse(const PrefillParams& p, float m, float l, int64_t token, int h, int tig) {
  if (p.lse != nullptr && tig == 0) {
    p.lse[token * p.lse_stride_t + int64_t(h) * p.lse_stride_h] = l > 0.0f ? (m + log2f(l)) * kLn2 : -INFINITY;
  }
}

/// A row of this thread, query `token`, head h, with its reduced sum l: out = O / l and its lse. o(j, c) is the row's
/// O element of column 8 j + 2 tig + c.
template <bool kBf16, int kDV, class RowO>
__device__ __forceinline__ void store_row(const PrefillParams& p, const RowO& o, float m, float l, int64_t token, int h,
                                          int tig) {
  const float inv = row_out_factor(l);
  uint8_t* orow = p.out + (token * p.out_stride_t + int64_t(h) * p.out_stride_h) * 2;
#pragma unroll
  for (int nt = 0; nt < kDV / 8; ++nt) {
    *reinterpret_cast<uint32_t*>(orow + (nt * 8 + 2 * tig) * 2) = pack_float2<kBf16>(o(nt, 0) * inv, o(nt, 1) * inv);
  }
  store_row_lse(p, m, l, token, h, tig);
}

}  // namespace mlakit::cuda::prefill
