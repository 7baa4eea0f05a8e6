// The CPU reference's merge of partial attention states (docs/spec.md section 6) against a float64 oracle
// written here: N-way and pair forms, out of place and in place (out aliasing part 0 / out_a),
// fp32/bf16/fp16 outputs, parts with lse = -inf (whose values are NaN here: they must never leak),
// rows where every part is empty (out = 0, lse = -inf), strided rows and poisoned outputs.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/compare.h"
#include "mlakit/numeric.h"
#include "mlakit/registry.h"
#include "reference/ops.h"
#include "reference/tensor_access.h"

namespace mlakit {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int64_t kRowPadding = 3;  // elements between rows of every [.., rows, d] buffer, poisoned

/// A float buffer of any output dtype, stored as raw bytes, with a strided [n, rows, d] view.
struct Buffer {
  DType dtype;
  int64_t n, rows, d;
  std::vector<uint8_t> bytes;

  Buffer(DType t, int64_t n_, int64_t rows_, int64_t d_) : dtype(t), n(n_), rows(rows_), d(d_) {
    bytes.assign(size_t(n * rows * row_stride()) * dtype_size(t), 0xFF);  // NaN in every dtype
  }
  int64_t row_stride() const { return d + kRowPadding; }
  TensorView view3() const {
    TensorView t = TensorView::contiguous(bytes.data(), dtype, {n, rows, d});
    t.stride[1] = row_stride();
    t.stride[0] = rows * row_stride();
    return t;
  }
  /// Part s as a [rows, d] view.
  TensorView view2(int64_t s) const {
    TensorView t = TensorView::contiguous(bytes.data() + size_t(s * rows * row_stride()) * dtype_size(dtype), dtype,
                                          {rows, d});
    t.stride[0] = row_stride();
    return t;
  }
  int64_t offset(int64_t s, int64_t r, int64_t c) const { return (s * rows + r) * row_stride() + c; }
  void set(int64_t s, int64_t r, int64_t c, float v) { reference::store_float(view3(), offset(s, r, c), v); }
  /// Read back through the dtype's 16/32-bit pattern, decoded here in float64.
  double get(int64_t s, int64_t r, int64_t c) const {
    const int64_t off = offset(s, r, c);
    if (dtype == DType::kFP32) {
      float f;
      std::memcpy(&f, bytes.data() + off * 4, 4);
      return f;
    }
    uint16_t bits;
    std::memcpy(&bits, bytes.data() + off * 2, 2);
    const bool fp16 = dtype == DType::kFP16;
    const int sign = bits >> 15, e_bits = fp16 ? 5 : 8, m_bits = fp16 ? 10 : 7, bias = fp16 ? 15 : 127;
    const int e = (bits >> m_bits) & ((1 << e_bits) - 1), m = bits & ((1 << m_bits) - 1);
    double mag;
    if (e == (1 << e_bits) - 1) mag = m ? NAN : kInf;
    else if (e == 0) mag = std::ldexp(double(m), 1 - bias - m_bits);
    else mag = std::ldexp(double((1 << m_bits) + m), e - bias - m_bits);
    return sign ? -mag : mag;
  }
};

struct Parts {
  Buffer out;
  std::vector<float> lse;  // [n, rows]
};

/// Random parts: lse in [-6, 6], about a quarter of them -inf (values NaN), and row 0 empty in every part.
Parts random_parts(DType dtype, int64_t n, int64_t rows, int64_t d, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f), lse(-6.0f, 6.0f), unit(0.0f, 1.0f);
  Parts p{Buffer(dtype, n, rows, d), std::vector<float>(size_t(n * rows))};
  for (int64_t s = 0; s < n; ++s) {
    for (int64_t r = 0; r < rows; ++r) {
      const bool empty = r == 0 || unit(rng) < 0.25f;
      p.lse[size_t(s * rows + r)] = empty ? -INFINITY : lse(rng);
      for (int64_t c = 0; c < d; ++c) p.out.set(s, r, c, empty ? NAN : value(rng));
    }
  }
  return p;
}

struct OracleResult {
  std::vector<float> out, lse, row_vmax;
};

OracleResult oracle_merge(const Parts& p) {
  const int64_t n = p.out.n, rows = p.out.rows, d = p.out.d;
  OracleResult r;
  for (int64_t row = 0; row < rows; ++row) {
    double m = -kInf;
    for (int64_t s = 0; s < n; ++s) m = std::max(m, double(p.lse[size_t(s * rows + row)]));
    double sum = 0;
    for (int64_t s = 0; s < n; ++s) {
      if (m > -kInf) sum += std::exp(double(p.lse[size_t(s * rows + row)]) - m);
    }
    const double l = m > -kInf ? m + std::log(sum) : -kInf;
    double vmax = 0;
    for (int64_t c = 0; c < d; ++c) {
      double acc = 0;
      for (int64_t s = 0; s < n; ++s) {
        const double ls = p.lse[size_t(s * rows + row)];
        if (ls == -kInf) continue;  // an empty part: no keys, no weight
        acc += std::exp(ls - l) * p.out.get(s, row, c);
        vmax = std::max(vmax, std::fabs(p.out.get(s, row, c)));
      }
      r.out.push_back(float(acc));
    }
    r.lse.push_back(float(l));
    r.row_vmax.push_back(float(vmax));
  }
  return r;
}

std::vector<float> read_out(const Buffer& b, int64_t s) {
  std::vector<float> v;
  for (int64_t r = 0; r < b.rows; ++r) {
    for (int64_t c = 0; c < b.d; ++c) v.push_back(float(b.get(s, r, c)));
  }
  return v;
}

/// The reference's out must equal the oracle within the rounding of out's dtype.
void expect_merged(const Buffer& out, int64_t s, const std::vector<float>& lse, const OracleResult& ref) {
  EXPECT_TRUE(test::check_out(read_out(out, s), ref.out, ref.row_vmax, out.d,
                              test::reference_rounding_tolerance(out.dtype)));
  EXPECT_TRUE(test::check_lse(lse, ref.lse));
}

constexpr int64_t kRows = 37, kDim = 20;

// ---------------------------------------------------------------- N-way

using MergeParams = std::tuple<int64_t /*n*/, DType /*parts*/, DType /*out*/>;
class MergeOracle : public ::testing::TestWithParam<MergeParams> {};

TEST_P(MergeOracle, OutOfPlace) {
  const auto [n, part_dtype, out_dtype] = GetParam();
  SCOPED_TRACE("n=" + std::to_string(n) + " parts=" + dtype_name(part_dtype) + " out=" + dtype_name(out_dtype));
  Parts parts = random_parts(part_dtype, n, kRows, kDim, 10 + uint64_t(n) * 7 + uint64_t(part_dtype) * 3 +
                                                              uint64_t(out_dtype));
  const OracleResult ref = oracle_merge(parts);
  Buffer out(out_dtype, 1, kRows, kDim);
  std::vector<float> lse(size_t(kRows), NAN);
  MergeProblem m;
  m.parts_out = parts.out.view3();
  m.parts_lse = TensorView::contiguous(parts.lse.data(), DType::kFP32, {n, kRows});
  m.out = out.view2(0);
  m.lse = TensorView::contiguous(lse.data(), DType::kFP32, {kRows});
  ASSERT_TRUE(reference::merge(m).ok());
  expect_merged(out, 0, lse, ref);
}

INSTANTIATE_TEST_SUITE_P(Parts, MergeOracle,
                         ::testing::Combine(::testing::Values(int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}),
                                            ::testing::Values(DType::kFP32, DType::kBF16, DType::kFP16),
                                            ::testing::Values(DType::kFP32, DType::kBF16, DType::kFP16)));

// In place: out and lse alias part 0 (so out's dtype is the parts' dtype).
class MergeInPlace : public ::testing::TestWithParam<std::tuple<int64_t, DType>> {};

TEST_P(MergeInPlace, OverPartZero) {
  const auto [n, part_dtype] = GetParam();
  SCOPED_TRACE("n=" + std::to_string(n) + " dtype=" + dtype_name(part_dtype));
  Parts parts = random_parts(part_dtype, n, kRows, kDim, 90 + uint64_t(n) * 7 + uint64_t(part_dtype));
  const OracleResult ref = oracle_merge(parts);  // before the inputs are overwritten
  MergeProblem m;
  m.parts_out = parts.out.view3();
  m.parts_lse = TensorView::contiguous(parts.lse.data(), DType::kFP32, {n, kRows});
  m.out = parts.out.view2(0);
  m.lse = TensorView::contiguous(parts.lse.data(), DType::kFP32, {kRows});
  ASSERT_TRUE(reference::merge(m).ok());
  expect_merged(parts.out, 0, std::vector<float>(parts.lse.begin(), parts.lse.begin() + kRows), ref);
}

INSTANTIATE_TEST_SUITE_P(Parts, MergeInPlace,
                         ::testing::Combine(::testing::Values(int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}),
                                            ::testing::Values(DType::kFP32, DType::kBF16, DType::kFP16)));

// ---------------------------------------------------------------- pair form

class MergePair : public ::testing::TestWithParam<DType> {};

TEST_P(MergePair, OutOfPlaceAndInPlaceMatchOracle) {
  const DType dtype = GetParam();
  SCOPED_TRACE(std::string("dtype=") + dtype_name(dtype));
  Parts parts = random_parts(dtype, 2, kRows, kDim, 55 + uint64_t(dtype));
  const OracleResult ref = oracle_merge(parts);
  MergePairProblem m;
  m.out_a = parts.out.view2(0);
  m.out_b = parts.out.view2(1);
  m.lse_a = TensorView::contiguous(parts.lse.data(), DType::kFP32, {kRows});
  m.lse_b = TensorView::contiguous(parts.lse.data() + kRows, DType::kFP32, {kRows});

  Buffer out(DType::kFP32, 1, kRows, kDim);
  std::vector<float> lse(size_t(kRows), NAN);
  m.out = out.view2(0);
  m.lse = TensorView::contiguous(lse.data(), DType::kFP32, {kRows});
  ASSERT_TRUE(reference::merge_pair(m).ok());
  expect_merged(out, 0, lse, ref);

  m.out = m.out_a;  // in place over out_a / lse_a
  m.lse = m.lse_a;
  ASSERT_TRUE(reference::merge_pair(m).ok());
  expect_merged(parts.out, 0, std::vector<float>(parts.lse.begin(), parts.lse.begin() + kRows), ref);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MergePair, ::testing::Values(DType::kFP32, DType::kBF16, DType::kFP16));

// ---------------------------------------------------------------- edge rules

// Merging with an empty part (lse = -inf) is the identity, bit for bit in fp32.
TEST(MergeRules, EmptyPartIsIdentity) {
  Parts parts = random_parts(DType::kFP32, 2, kRows, kDim, 3);
  for (int64_t r = 0; r < kRows; ++r) {
    parts.lse[size_t(kRows + r)] = -INFINITY;
    if (r > 0) parts.lse[size_t(r)] = float(r) - 10.0f;  // every row of part 0 non-empty except row 0
    for (int64_t c = 0; c < kDim && r > 0; ++c) parts.out.set(0, r, c, 0.01f * float(c - r));
  }
  Buffer out(DType::kFP32, 1, kRows, kDim);
  std::vector<float> lse(size_t(kRows), NAN);
  MergeProblem m;
  m.parts_out = parts.out.view3();
  m.parts_lse = TensorView::contiguous(parts.lse.data(), DType::kFP32, {2, kRows});
  m.out = out.view2(0);
  m.lse = TensorView::contiguous(lse.data(), DType::kFP32, {kRows});
  ASSERT_TRUE(reference::merge(m).ok());
  EXPECT_EQ(lse[0], -INFINITY);
  for (int64_t c = 0; c < kDim; ++c) EXPECT_EQ(out.get(0, 0, c), 0.0) << "row 0 col " << c;
  for (int64_t r = 1; r < kRows; ++r) {
    EXPECT_EQ(lse[size_t(r)], parts.lse[size_t(r)]) << "row " << r;
    for (int64_t c = 0; c < kDim; ++c) EXPECT_EQ(out.get(0, r, c), parts.out.get(0, r, c)) << "row " << r;
  }
}

// Two equal parts: out unchanged, lse + ln 2.
TEST(MergeRules, TwoEqualPartsAddLn2) {
  Buffer parts(DType::kFP32, 2, 2, 4);
  std::vector<float> part_lse = {1.5f, -3.0f, 1.5f, -3.0f};
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t r = 0; r < 2; ++r) {
      for (int64_t c = 0; c < 4; ++c) parts.set(s, r, c, 0.25f * float(c + 1) - float(r));
    }
  }
  Buffer out(DType::kFP32, 1, 2, 4);
  std::vector<float> lse(2, NAN);
  MergeProblem m;
  m.parts_out = parts.view3();
  m.parts_lse = TensorView::contiguous(part_lse.data(), DType::kFP32, {2, 2});
  m.out = out.view2(0);
  m.lse = TensorView::contiguous(lse.data(), DType::kFP32, {2});
  ASSERT_TRUE(reference::merge(m).ok());
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_NEAR(lse[size_t(r)], part_lse[size_t(r)] + std::log(2.0), 1e-6);
    for (int64_t c = 0; c < 4; ++c) EXPECT_NEAR(out.get(0, r, c), parts.get(0, r, c), 1e-6);
  }
}

TEST(MergeRules, LseIsOptional) {
  Parts parts = random_parts(DType::kBF16, 3, kRows, kDim, 21);
  const OracleResult ref = oracle_merge(parts);
  Buffer out(DType::kBF16, 1, kRows, kDim);
  MergeProblem m;
  m.parts_out = parts.out.view3();
  m.parts_lse = TensorView::contiguous(parts.lse.data(), DType::kFP32, {3, kRows});
  m.out = out.view2(0);
  ASSERT_TRUE(reference::merge(m).ok());
  EXPECT_TRUE(test::check_out(read_out(out, 0), ref.out, ref.row_vmax, kDim,
                              test::reference_rounding_tolerance(DType::kBF16)));
}

TEST(MergeRules, NoRowsIgnoresTheStridesOfEmptyTensors) {
  // Found by the validation fuzzer under UBSan: an empty tensor spans no byte whatever its strides, so validate()
  // accepts a huge part stride there, and the reference computed part pointers from it (signed overflow).
  std::vector<float> parts(8), lse(8), out(8), out_lse(8);
  MergeProblem m;
  m.parts_out = TensorView::strided(parts.data(), DType::kFP32, {2, 0, 4}, {int64_t(1) << 61, 4, 1});
  m.parts_lse = TensorView::strided(lse.data(), DType::kFP32, {2, 0}, {int64_t(1) << 61, 1});
  m.out = TensorView::contiguous(out.data(), DType::kFP32, {0, 4});
  m.lse = TensorView::contiguous(out_lse.data(), DType::kFP32, {0});
  const Registry registry = make_default_registry();
  const Status s = registry.get("reference")->run(m, nullptr);
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(MergeRules, NoColumnsIgnoresTheStridesOfEmptyParts) {
  // The same with rows but d = 0 (a review found it): parts_out has no element, so its part stride is never checked
  // and must never be used; the LSEs still merge.
  std::vector<float> parts(8), lse = {0.0f, 1.0f, 0.0f, 1.0f}, out(8), out_lse(2, -7.0f);
  MergeProblem m;
  m.parts_out = TensorView::strided(parts.data(), DType::kFP32, {2, 2, 0}, {int64_t(1) << 61, 0, 1});
  m.parts_lse = TensorView::contiguous(lse.data(), DType::kFP32, {2, 2});
  m.out = TensorView::contiguous(out.data(), DType::kFP32, {2, 0});
  m.lse = TensorView::contiguous(out_lse.data(), DType::kFP32, {2});
  const Registry registry = make_default_registry();
  const Status s = registry.get("reference")->run(m, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_NEAR(out_lse[0], std::log(2.0f), 1e-6f);         // both parts' LSE 0
  EXPECT_NEAR(out_lse[1], 1.0f + std::log(2.0f), 1e-6f);  // both 1
}

TEST(MergeThroughBackend, RegistryReferenceMatchesDirectCall) {
  const Registry registry = make_default_registry();
  const Backend* backend = registry.get("reference");
  ASSERT_NE(backend, nullptr);
  Parts parts = random_parts(DType::kBF16, 3, kRows, kDim, 33);
  Buffer direct(DType::kFP32, 1, kRows, kDim), via(DType::kFP32, 1, kRows, kDim);
  std::vector<float> lse_direct(size_t(kRows), NAN), lse_via(size_t(kRows), NAN);
  MergeProblem m;
  m.parts_out = parts.out.view3();
  m.parts_lse = TensorView::contiguous(parts.lse.data(), DType::kFP32, {3, kRows});
  m.out = direct.view2(0);
  m.lse = TensorView::contiguous(lse_direct.data(), DType::kFP32, {kRows});
  ASSERT_TRUE(reference::merge(m).ok());
  m.out = via.view2(0);
  m.lse = TensorView::contiguous(lse_via.data(), DType::kFP32, {kRows});
  const Status st = backend->run(m, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(0, std::memcmp(direct.bytes.data(), via.bytes.data(), direct.bytes.size()));
  EXPECT_EQ(lse_direct, lse_via);

  MergePairProblem pair;
  pair.out_a = parts.out.view2(0);
  pair.out_b = parts.out.view2(1);
  pair.lse_a = TensorView::contiguous(parts.lse.data(), DType::kFP32, {kRows});
  pair.lse_b = TensorView::contiguous(parts.lse.data() + kRows, DType::kFP32, {kRows});
  pair.out = via.view2(0);
  pair.lse = TensorView::contiguous(lse_via.data(), DType::kFP32, {kRows});
  const Status st_pair = backend->run(pair, nullptr);
  ASSERT_TRUE(st_pair.ok()) << st_pair.to_string();
}

}  // namespace
}  // namespace mlakit
