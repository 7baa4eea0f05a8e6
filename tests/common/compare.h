#pragma once
// Comparison of an operation's outputs against a reference with the tolerances of docs/spec.md section 10.
// Every element is checked; the result names the first failing index with its value and the expected
// one, and counts all failures, so a test never passes on "most elements are close".

#include <gtest/gtest.h>

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "mlakit/types.h"

namespace mlakit::test {

/// Elementwise bound |out - ref| <= vmax_coef * vmax + ref_coef * |ref| (docs/spec.md 10).
struct OutTolerance {
  double vmax_coef;
  double ref_coef;
};

/// bf16: 2^-8 vmax + 2^-6 |ref|; fp16: 2^-10 vmax + 2^-9 |ref|. fp32 is not in docs/spec.md: a float32
/// rounding of a float64 result is exact to 2^-24, and 2^-20 leaves room for summation order.
OutTolerance out_tolerance(DType out_dtype);

/// Tolerance for testing the reference itself against a float64 oracle: its only error is the final
/// rounding to the output dtype, half an ulp (2^-8 relative for bf16's 8-bit significand, 2^-11 for fp16,
/// 2^-24 for fp32), plus 2^-20 * vmax for subnormal results and summation order.
OutTolerance reference_rounding_tolerance(DType out_dtype);

/// LSE bound |lse - ref| <= kLseAbs + kLseRel * |ref| (docs/spec.md 10).
inline constexpr double kLseAbs = 1e-4;
inline constexpr double kLseRel = 1e-4;

/// Checks `out` against `ref`, both viewed as rows of `row_len` elements. `row_vmax` holds vmax (the
/// largest |value| among the rows attended) per row, or a single value used for every row. A
/// non-finite `out` where `ref` is finite always fails; a non-finite `ref` fails too (the reference
/// must never produce one).
::testing::AssertionResult check_out(std::span<const float> out, std::span<const float> ref,
                                     std::span<const float> row_vmax, int64_t row_len, DType out_dtype,
                                     std::string_view what = "out");
/// Same with an explicit tolerance (e.g. a looser one for a known extra rounding).
::testing::AssertionResult check_out(std::span<const float> out, std::span<const float> ref,
                                     std::span<const float> row_vmax, int64_t row_len, OutTolerance tol,
                                     std::string_view what = "out");

/// Checks LSE values: a `-inf` reference must be matched exactly (empty rows), a finite one within
/// kLseAbs + kLseRel * |ref| by a finite value.
::testing::AssertionResult check_lse(std::span<const float> lse, std::span<const float> ref,
                                     std::string_view what = "lse");

/// `n` elements of a bf16/fp16 (16-bit patterns) or fp32 buffer as float32.
std::vector<float> to_floats(const void* data, DType dtype, int64_t n);
inline std::vector<float> to_floats(const std::vector<uint16_t>& bits, DType dtype) {
  return to_floats(bits.data(), dtype, int64_t(bits.size()));
}

}  // namespace mlakit::test
