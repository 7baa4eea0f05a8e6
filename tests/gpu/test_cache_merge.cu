// cuda merge_states (docs/spec.md section 6), two-way and N-way, in place and out of place, against the CPU
// reference. Both compute weights and sums in double and round once to the output dtype, so they may
// differ only where the two double sums straddle a rounding boundary: at most one unit in the last place
// of the output dtype (checked with that bound, every element). Empty parts (L = -inf) carry NaN in their
// O to prove they are never read; rows where every part is empty must give exactly O = 0 and L = -inf.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mlakit/backend.h"
#include "mlakit/problems.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr uint64_t kSeed = 0x3e46e;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr double kEmptyPartFraction = 0.2;
constexpr double kEmptyRowFraction = 0.1;
constexpr float kLseLo = -5.0f, kLseHi = 20.0f;


/// Relative size of one unit in the last place (the bound between two correctly rounded neighbours).
double ulp_rel(DType t) {
  switch (t) {
    case DType::kBF16: return std::ldexp(1.0, -7);
    case DType::kFP16: return std::ldexp(1.0, -10);
    default: return std::ldexp(1.0, -23);
  }
}

/// Spacing of the smallest subnormals of the output dtype: the absolute floor of one ulp.
double ulp_abs(DType t) {
  switch (t) {
    case DType::kBF16: return std::ldexp(1.0, -133);
    case DType::kFP16: return std::ldexp(1.0, -24);
    default: return std::ldexp(1.0, -149);
  }
}

float to_float(const std::vector<uint8_t>& bytes, DType t, size_t i) {
  if (t == DType::kFP32) {
    float f;
    std::memcpy(&f, bytes.data() + 4 * i, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, bytes.data() + 2 * i, 2);
  return t == DType::kBF16 ? bf16_to_float(h) : fp16_to_float(h);
}

/// Random partial states: n parts of [rows, d] (row stride d + gap), LSEs with empty parts and empty rows.
struct States {
  int64_t n = 0, rows = 0, d = 0, row_stride = 0;
  DType dtype = DType::kFP32;
  std::vector<uint8_t> out;  // [n, rows, row_stride]
  std::vector<float> lse;    // [n, rows]
  static States make(int64_t n, int64_t rows, int64_t d, DType dtype, bool gap, std::mt19937_64& rng) {
    States s;
    s.n = n, s.rows = rows, s.d = d, s.dtype = dtype;
    s.row_stride = d + (gap ? 4 : 0);
    std::vector<float> values = random_floats(rng, size_t(n * rows * s.row_stride), 1.0f);
    std::uniform_real_distribution<float> l(kLseLo, kLseHi);
    std::bernoulli_distribution empty_part(kEmptyPartFraction), empty_row(kEmptyRowFraction);
    s.lse.resize(size_t(n * rows));
    for (int64_t r = 0; r < rows; ++r) {
      const bool row_empty = empty_row(rng);
      for (int64_t p = 0; p < n; ++p) {
        const bool empty = row_empty || empty_part(rng);
        s.lse[size_t(p * rows + r)] = empty ? kNegInf : l(rng);
        if (empty)  // an empty part's O is never read: NaN would leak into the result if it were
          for (int64_t c = 0; c < d; ++c) values[size_t((p * rows + r) * s.row_stride + c)] = std::nanf("");
      }
    }
    s.out = encode_values(values, dtype);
    return s;
  }
};

struct Outputs {
  std::vector<uint8_t> out;
  std::vector<float> lse;
};

/// Compares a cuda result with the reference's: every element within one ulp, -inf LSE exact, O = 0 rows.
void expect_close(const Outputs& got, const Outputs& want, DType out_dtype, int64_t rows, int64_t d,
                  int64_t out_stride, bool with_lse) {
  int64_t bad = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < d; ++c) {
      const size_t i = size_t(r * out_stride + c);
      const double g = to_float(got.out, out_dtype, i), w = to_float(want.out, out_dtype, i);
      const bool ok = std::isfinite(g) && std::fabs(g - w) <= ulp_rel(out_dtype) * std::fabs(w) + ulp_abs(out_dtype);
      if (!ok && bad++ < 5) ADD_FAILURE() << "out[" << r << "][" << c << "] = " << g << ", reference " << w;
    }
    if (!with_lse) continue;
    const float g = got.lse[size_t(r)], w = want.lse[size_t(r)];
    if (std::isinf(w)) {
      EXPECT_EQ(g, w) << "lse[" << r << "]";
    } else {
      EXPECT_NEAR(g, w, 4e-7 * (1.0 + std::fabs(w))) << "lse[" << r << "]";
    }
  }
  EXPECT_EQ(bad, 0) << "elements outside one ulp of the reference";
}

// ---- N-way ----

using MergeParam = std::tuple<int64_t, int64_t, int64_t, DType, DType, bool>;
class MergeGrid : public ::testing::TestWithParam<MergeParam> {};

TEST_P(MergeGrid, MatchesReference) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  const auto [n, rows, d, in_dtype, out_dtype, in_place] = GetParam();
  SCOPED_TRACE("n=" + std::to_string(n) + " rows=" + std::to_string(rows) + " d=" + std::to_string(d) +
               " in=" + dtype_name(in_dtype) + " out=" + dtype_name(out_dtype) + " in_place=" + std::to_string(in_place));
  std::mt19937_64 rng(kSeed + uint64_t(n * 1000 + rows * 10 + d));
  const States s = States::make(n, rows, d, in_dtype, !in_place, rng);
  const int64_t es = int64_t(dtype_size(out_dtype));
  const int64_t out_stride = in_place ? s.row_stride : d + 8;

  // Reference on host copies.
  Outputs ref{in_place ? s.out : pattern_bytes(size_t(rows * out_stride * es)), in_place ? s.lse : std::vector<float>(size_t(rows), 7.0f)};
  std::vector<uint8_t> ref_parts = s.out;
  std::vector<float> ref_lse_parts = s.lse;
  const auto make = [&](void* parts, void* parts_lse, void* out, void* lse, Device dev) {
    MergeProblem p;
    p.parts_out = TensorView::strided(parts, in_dtype, {n, rows, d}, {rows * s.row_stride, s.row_stride, 1}, dev);
    p.parts_lse = TensorView::strided(parts_lse, DType::kFP32, {n, rows}, {rows, 1}, dev);
    p.out = in_place ? TensorView::strided(parts, out_dtype, {rows, d}, {s.row_stride, 1}, dev)
                     : TensorView::strided(out, out_dtype, {rows, d}, {out_stride, 1}, dev);
    p.lse = in_place ? TensorView::strided(parts_lse, DType::kFP32, {rows}, {1}, dev) : TensorView::strided(lse, DType::kFP32, {rows}, {1}, dev);
    return p;
  };
  const Status rs = reference_backend()->run(
      make(ref_parts.data(), ref_lse_parts.data(), ref.out.data(), ref.lse.data(), Device::cpu()), nullptr);
  ASSERT_TRUE(rs.ok()) << rs.to_string();
  if (in_place) ref = {ref_parts, ref_lse_parts};

  DeviceBuffer parts_d, lse_d, out_d, olse_d;
  DeviceBuffer::upload(&parts_d, s.out);
  DeviceBuffer::upload(&lse_d, s.lse);
  DeviceBuffer::upload(&out_d, pattern_bytes(size_t(rows * out_stride * es)));
  DeviceBuffer::upload(&olse_d, std::vector<float>(size_t(rows), 7.0f));
  const MergeProblem dp = make(parts_d.get(), lse_d.get(), out_d.get(), olse_d.get(), Device::cuda());
  ASSERT_TRUE(cuda->supports(dp).ok()) << cuda->supports(dp).to_string();
  ASSERT_TRUE(cuda->run(dp, nullptr).ok());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  Outputs got;
  got.out = in_place ? parts_d.download<uint8_t>(s.out.size()) : out_d.download<uint8_t>(ref.out.size());
  got.lse = in_place ? lse_d.download<float>(s.lse.size()) : olse_d.download<float>(size_t(rows));
  expect_close(got, ref, out_dtype, rows, d, out_stride, true);
  if (in_place) {  // parts 1.. untouched
    for (size_t i = size_t(rows * s.row_stride * es); i < s.out.size(); ++i)
      ASSERT_EQ(got.out[i], s.out[i]) << "part byte " << i << " changed";
  } else {  // row-stride gaps untouched
    const auto pattern = pattern_bytes(got.out.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t b = d * es; b < out_stride * es; ++b)
        ASSERT_EQ(got.out[size_t(r * out_stride * es + b)], pattern[size_t(r * out_stride * es + b)]);
  }
}

/// n x rows x d x in x out x in_place, in place only where out has the parts' dtype (it aliases part 0).
std::vector<MergeParam> merge_grid() {
  std::vector<MergeParam> v;
  for (int64_t n : {1, 3, 40})           // 40 > 32: weights past one warp's lanes
    for (int64_t rows : {1, 300})
      for (int64_t d : {4, 132, 512})      // 132: a partial 128-element step
        for (DType in : {DType::kFP32, DType::kBF16, DType::kFP16})
          for (DType out : {DType::kFP32, DType::kBF16, DType::kFP16})
            for (bool in_place : {false, true})
              if (!in_place || in == out) v.emplace_back(n, rows, d, in, out, in_place);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Grid, MergeGrid, ::testing::ValuesIn(merge_grid()));

// ---- two-way ----

using PairParam = std::tuple<DType, DType, int, bool>;  // in, out, alias (0 none, 1 out=a, 2 out=b), lse
class MergePairGrid : public ::testing::TestWithParam<PairParam> {};

TEST_P(MergePairGrid, MatchesReference) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  const auto [in_dtype, out_dtype, alias, with_lse] = GetParam();
  SCOPED_TRACE(std::string("in=") + dtype_name(in_dtype) + " out=" + dtype_name(out_dtype) +
               " alias=" + std::to_string(alias) + " lse=" + std::to_string(with_lse));
  constexpr int64_t rows = 257, d = 512;
  std::mt19937_64 rng(kSeed + uint64_t(alias * 10 + with_lse));
  States a = States::make(1, rows, d, in_dtype, false, rng);
  States b = States::make(1, rows, d, in_dtype, true, rng);  // a different row stride than a
  const int64_t es = int64_t(dtype_size(out_dtype));
  const int64_t out_stride = alias == 1 ? a.row_stride : alias == 2 ? b.row_stride : d + 12;

  const auto make = [&](void* oa, void* la, void* ob, void* lb, void* out, void* lse, Device dev) {
    MergePairProblem p;
    p.out_a = TensorView::strided(oa, in_dtype, {rows, d}, {a.row_stride, 1}, dev);
    p.lse_a = TensorView::strided(la, DType::kFP32, {rows}, {1}, dev);
    p.out_b = TensorView::strided(ob, in_dtype, {rows, d}, {b.row_stride, 1}, dev);
    p.lse_b = TensorView::strided(lb, DType::kFP32, {rows}, {1}, dev);
    void* o = alias == 1 ? oa : alias == 2 ? ob : out;
    void* l = alias == 1 ? la : alias == 2 ? lb : lse;
    p.out = TensorView::strided(o, out_dtype, {rows, d}, {out_stride, 1}, dev);
    if (with_lse) p.lse = TensorView::strided(l, DType::kFP32, {rows}, {1}, dev);
    return p;
  };
  // Reference on host copies.
  States ra = a, rb = b;
  std::vector<uint8_t> rout = pattern_bytes(size_t(rows * out_stride * es));
  std::vector<float> rlse(static_cast<size_t>(rows), 7.0f);
  ASSERT_TRUE(reference_backend()
                  ->run(make(ra.out.data(), ra.lse.data(), rb.out.data(), rb.lse.data(), rout.data(), rlse.data(),
                             Device::cpu()),
                        nullptr)
                  .ok());
  DeviceBuffer oa, la, ob, lb, out, lse;
  DeviceBuffer::upload(&oa, a.out);
  DeviceBuffer::upload(&la, a.lse);
  DeviceBuffer::upload(&ob, b.out);
  DeviceBuffer::upload(&lb, b.lse);
  DeviceBuffer::upload(&out, pattern_bytes(size_t(rows * out_stride * es)));
  DeviceBuffer::upload(&lse, std::vector<float>(size_t(rows), 7.0f));
  const MergePairProblem dp = make(oa.get(), la.get(), ob.get(), lb.get(), out.get(), lse.get(), Device::cuda());
  ASSERT_TRUE(cuda->supports(dp).ok()) << cuda->supports(dp).to_string();
  ASSERT_TRUE(cuda->run(dp, nullptr).ok());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());

  Outputs got, want;
  if (alias == 1) {
    got = {oa.download<uint8_t>(a.out.size()), la.download<float>(size_t(rows))};
    want = {ra.out, ra.lse};
  } else if (alias == 2) {
    got = {ob.download<uint8_t>(b.out.size()), lb.download<float>(size_t(rows))};
    want = {rb.out, rb.lse};
  } else {
    got = {out.download<uint8_t>(rout.size()), lse.download<float>(size_t(rows))};
    want = {rout, rlse};
  }
  expect_close(got, want, out_dtype, rows, d, out_stride, with_lse);
  if (!with_lse && alias == 0) {
    for (float v : got.lse) ASSERT_EQ(v, 7.0f) << "lse written although not given";
  }
}

/// in x out x alias x lse, aliasing only where out has the parts' dtype.
std::vector<PairParam> pair_grid() {
  std::vector<PairParam> v;
  for (DType in : {DType::kFP32, DType::kBF16, DType::kFP16})
    for (DType out : {DType::kFP32, DType::kBF16, DType::kFP16})
      for (int alias : {0, 1, 2})
        for (bool lse : {false, true})
          if (alias == 0 || in == out) v.emplace_back(in, out, alias, lse);
  return v;
}
INSTANTIATE_TEST_SUITE_P(Grid, MergePairGrid, ::testing::ValuesIn(pair_grid()));

TEST(MergeSupports, RejectsWhatTheKernelDoesNotHandle) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  DeviceBuffer parts(4 * 8 * 64 * 4), plse(4 * 8 * 4), out(8 * 64 * 4);
  MergeProblem p;
  p.parts_out = TensorView::strided(parts.get(), DType::kFP32, {4, 8, 62}, {8 * 64, 64, 1}, Device::cuda());
  p.parts_lse = TensorView::strided(plse.get(), DType::kFP32, {4, 8}, {8, 1}, Device::cuda());
  p.out = TensorView::strided(out.get(), DType::kFP32, {8, 62}, {64, 1}, Device::cuda());
  ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
  Status s = cuda->supports(p);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
  EXPECT_NE(s.message().find("d=62"), std::string::npos) << s.message();

  p.parts_out.shape[2] = p.out.shape[1] = 64;
  ASSERT_TRUE(cuda->supports(p).ok());
  p.out.stride[0] = 66;  // rows no longer 16-byte aligned for float4 steps
  const Status s2 = cuda->supports(p);
  EXPECT_EQ(s2.code(), StatusCode::kNotSupported) << s2.to_string();
  EXPECT_NE(s2.message().find("out.stride[0]=66"), std::string::npos) << s2.message();
  EXPECT_FALSE(cuda->run(p, nullptr).ok());
}

}  // namespace
}  // namespace mlakit::test
