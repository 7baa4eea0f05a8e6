#pragma once
// The one RoPE pair rotation of docs/spec.md section 7, shared by the reference rope and the fused RoPE of
// append_kv so both produce the same bits.

#include <cstdint>

#include "mlakit/problems.h"

namespace mlakit::reference {

/// Indices (a, b) of rotation pair `i` in [0, d_r/2) of a d_r-wide vector:
/// interleaved (DeepSeek, GPT-J) pairs neighbours (2i, 2i+1); neox pairs the halves (i, i + d_r/2).
struct RopePair {
  int64_t a;
  int64_t b;
};
inline RopePair rope_pair(RopeStyle style, int64_t i, int64_t d_r) {
  if (style == RopeStyle::kNeox) return {i, i + d_r / 2};
  return {2 * i, 2 * i + 1};
}

/// Rotates `x[0, d_r)` in place by the table row `cos_sin_row` = [cos_0 .. cos_{d_r/2-1} | sin_0 .. ]
/// (element stride `cs_stride`): y_a = x_a cos - x_b sin, y_b = x_a sin + x_b cos.
/// Computed in double: each product of two floats is exact there (24 + 24 bits <= 53), so the result does
/// not depend on whether the compiler contracts to FMA; kernels in fp32 may differ by about 1 fp32 ulp.
inline void rope_rotate(float* x, int64_t d_r, const float* cos_sin_row, int64_t cs_stride, RopeStyle style) {
  const int64_t half = d_r / 2;
  for (int64_t i = 0; i < half; ++i) {
    const RopePair p = rope_pair(style, i, d_r);
    const double c = cos_sin_row[i * cs_stride];
    const double s = cos_sin_row[(half + i) * cs_stride];
    const double xa = x[p.a], xb = x[p.b];
    x[p.a] = static_cast<float>(xa * c - xb * s);
    x[p.b] = static_cast<float>(xa * s + xb * c);
  }
}

}  // namespace mlakit::reference
