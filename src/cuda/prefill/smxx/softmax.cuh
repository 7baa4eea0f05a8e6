#pragma once
// The end of the online softmax both prefill kernels run: a row's output and lse. The row update per key tile
// (advance_rows, reduce_row_sums) is cuda/common/online_softmax.cuh, shared with the decode kernels.

#include <cstdint>

#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/prefill/smxx/params.h"

namespace mlakit::cuda::prefill {

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
