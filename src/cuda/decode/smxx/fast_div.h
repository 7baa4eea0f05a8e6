#pragma once
// Division by a divisor fixed for a whole launch, without the integer-division instruction sequence: sparse decode
// turns every row id into (page, slot) by dividing by the page size, which may be any P >= 1 (docs/spec.md
// section 2). The GPU has no integer divider: `id / P` compiles to a float reciprocal with corrections, about 20
// instructions, and the Hopper producer that looks rows up is instruction-bound on fp8 caches. Here the host picks a
// multiplier once, and the device divides with one multiply-high and one shift (Granlund and Montgomery's method).
// Plain C++ as well, so that a CPU test checks it against the division it replaces.

#include <cstdint>

#include "mlakit/numeric.h"  // MLAKIT_HOST_DEVICE

namespace mlakit::cuda::decode {

/// n / d for 0 <= n < 2^31 and a fixed 1 <= d < 2^31: (n * mul) >> (32 + shift), with mul = ceil(2^(31 + l) / d),
/// l = ceil(log2 d), shift = l - 1. Exact there: mul * d - 2^(31 + l) < d <= 2^l, so the product overshoots n * 2^(31 +
/// l) / d by less than n / 2^31 < 1 part in d, which cannot carry the quotient past the next integer. mul = 0 means
/// d = 1 (the formula would need a shift of -1).
struct FastDiv {
  uint32_t mul = 0;
  uint32_t shift = 0;
};

inline FastDiv make_fast_div(int32_t d) {
  FastDiv f;
  if (d <= 1) return f;
  uint32_t l = 0;
  while ((int64_t(1) << l) < d) ++l;
  f.mul = uint32_t(((uint64_t(1) << (31 + l)) + uint64_t(d) - 1) / uint64_t(d));
  f.shift = l - 1;
  return f;
}

MLAKIT_HOST_DEVICE int32_t fast_div(int32_t n, FastDiv f) {
  if (f.mul == 0) return n;
  return int32_t(uint32_t((uint64_t(uint32_t(n)) * f.mul) >> 32) >> f.shift);
}

}  // namespace mlakit::cuda::decode
