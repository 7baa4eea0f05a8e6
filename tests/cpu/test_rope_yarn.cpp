// YaRN helpers (docs/spec.md section 7) against values derived by hand from DeepSeek-V3's config, and the
// reference RoPE against hand-made rotations and an independent double-precision rotation.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mlakit/numeric.h"
#include "mlakit/rope.h"
#include "reference/ops.h"

namespace mlakit {
namespace {

constexpr uint64_t kSeed = 7;

// ---- YaRN scalars ----

TEST(Yarn, DeepSeekV3SoftmaxScale) {
  // docs/spec.md section 7: tau = 1.3688879^2 / sqrt(192) = 0.13523378 for DeepSeek-V3.
  const double tau = yarn_softmax_scale(YarnConfig{});
  EXPECT_NEAR(tau, 0.13523378, 0.13523378 * 1e-7);
}

TEST(Yarn, Mscale) {
  EXPECT_NEAR(yarn_mscale(40.0, 1.0), 1.3688879, 1.3688879 * 1e-7);  // 0.1 * ln(40) + 1
  EXPECT_NEAR(yarn_mscale(40.0, 0.707), 0.1 * 0.707 * 3.6888794541139363 + 1.0, 1e-12);
  EXPECT_EQ(yarn_mscale(1.0, 1.0), 1.0);   // no scaling at factor 1
  EXPECT_EQ(yarn_mscale(0.5, 1.0), 1.0);   // nor below
}

TEST(Yarn, SoftmaxScaleWithoutScalingIsInverseSqrtOfHeadDim) {
  YarnConfig cfg;
  cfg.factor = 1.0;
  EXPECT_DOUBLE_EQ(yarn_softmax_scale(cfg), 1.0 / std::sqrt(192.0));
  EXPECT_DOUBLE_EQ(yarn_softmax_scale(cfg, 64), 1.0 / std::sqrt(128.0));
}

// DeepSeek-V3 (d_r 64, base 1e4, orig 4096, beta_fast 32, beta_slow 1), derived by hand:
//   corr(32) = 64 * ln(4096 / (32 * 2 pi)) / (2 ln 1e4) = 10.47  -> low  = floor = 10
//   corr(1)  = 64 * ln(4096 / (1 * 2 pi))  / (2 ln 1e4) = 22.51  -> high = ceil  = 23
// so pairs 0..10 keep theta_i, pairs 23..31 get theta_i / 40, pairs between blend with ramp (i - 10) / 13.
constexpr int kV3Low = 10;
constexpr int kV3High = 23;

double v3_inv_freq(int i) {
  const double theta = std::pow(10000.0, -double(2 * i) / 64.0);
  const double ramp = std::clamp(double(i - kV3Low) / double(kV3High - kV3Low), 0.0, 1.0);
  return theta * (1.0 - ramp) + theta / 40.0 * ramp;
}

TEST(Yarn, InvFreqDeepSeekV3) {
  const std::vector<double> inv_freq = yarn_inv_freq(YarnConfig{});
  ASSERT_EQ(inv_freq.size(), 32u);
  for (int i = 0; i < 32; ++i) {
    SCOPED_TRACE("pair " + std::to_string(i));
    const double theta = std::pow(10000.0, -double(2 * i) / 64.0);
    if (i <= kV3Low) {
      EXPECT_NEAR(inv_freq[i], theta, theta * 1e-14);  // fast: unchanged
    }
    if (i >= kV3High) {
      EXPECT_NEAR(inv_freq[i], theta / 40.0, theta * 1e-14);  // slow: interpolated
    }
    EXPECT_NEAR(inv_freq[i], v3_inv_freq(i), theta * 1e-14);
  }
}

TEST(Yarn, InvFreqWithoutScalingIsPlainRope) {
  YarnConfig cfg;
  cfg.factor = 1.0;
  const std::vector<double> inv_freq = yarn_inv_freq(cfg);
  ASSERT_EQ(inv_freq.size(), 32u);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(inv_freq[i], std::pow(10000.0, -i / 32.0), 1e-15) << i;
}

struct TableCase {
  double mscale, mscale_all_dim;
};
class YarnTable : public ::testing::TestWithParam<TableCase> {};

TEST_P(YarnTable, MatchesIndependentDoubleComputation) {
  YarnConfig cfg;
  cfg.mscale = GetParam().mscale;
  cfg.mscale_all_dim = GetParam().mscale_all_dim;
  // Attention scale by hand: (0.1 m ln 40 + 1) / (0.1 m_all ln 40 + 1).
  const double ln40 = std::log(40.0);
  const double scale = (0.1 * cfg.mscale * ln40 + 1.0) / (0.1 * cfg.mscale_all_dim * ln40 + 1.0);
  constexpr int64_t kMaxPos = 65536;
  const std::vector<float> table = yarn_cos_sin_table(cfg, kMaxPos);
  ASSERT_EQ(table.size(), size_t(kMaxPos * 64));
  for (int64_t pos : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{4095}, int64_t{4096}, kMaxPos - 1}) {
    for (int i = 0; i < 32; ++i) {
      SCOPED_TRACE("pos " + std::to_string(pos) + " pair " + std::to_string(i));
      const double phi = double(pos) * v3_inv_freq(i);
      // float32 storage: half an ulp of values <= ~1.3 is 6e-8; allow for the blend's last-bit differences
      // in phi (|phi| <= 65535 * 1 gives ~1e-11 absolute).
      EXPECT_NEAR(table[pos * 64 + i], std::cos(phi) * scale, 2e-7);
      EXPECT_NEAR(table[pos * 64 + 32 + i], std::sin(phi) * scale, 2e-7);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Mscales, YarnTable,
                         ::testing::Values(TableCase{1.0, 1.0}, TableCase{0.707, 1.0}, TableCase{1.0, 0.707}),
                         [](const ::testing::TestParamInfo<TableCase>& info) { return "case" + std::to_string(info.index); });

// ---- reference RoPE ----

RopeProblem make_rope(std::vector<float>& x, int64_t num_tokens, int64_t num_heads, int64_t d_r,
                      std::vector<int64_t>& positions, std::vector<float>& cos_sin, RopeStyle style) {
  RopeProblem p;
  p.x = TensorView::contiguous(x.data(), DType::kFP32, {num_tokens, num_heads, d_r});
  p.positions = TensorView::contiguous(positions.data(), DType::kInt64, {num_tokens});
  p.cos_sin = TensorView::contiguous(cos_sin.data(), DType::kFP32, {int64_t(cos_sin.size()) / d_r, d_r});
  p.style = style;
  return p;
}

TEST(Rope, InterleavedVersusNeoxHandExample) {
  // d_r = 4, one table row: pair 0 turns by 90 degrees (cos 0, sin 1), pair 1 by 180 (cos -1, sin 0).
  std::vector<float> cos_sin = {0.0f, -1.0f, 1.0f, 0.0f};
  std::vector<int64_t> positions = {0};
  {
    // interleaved pairs (0,1), (2,3): (1,2) -> (-2, 1); (3,4) -> (-3, -4)
    std::vector<float> x = {1, 2, 3, 4};
    ASSERT_TRUE(reference::rope(make_rope(x, 1, 1, 4, positions, cos_sin, RopeStyle::kInterleaved)).ok());
    EXPECT_EQ(x, (std::vector<float>{-2, 1, -3, -4}));
  }
  {
    // neox pairs (0,2), (1,3): (1,3) -> (-3, 1); (2,4) -> (-2, -4)
    std::vector<float> x = {1, 2, 3, 4};
    ASSERT_TRUE(reference::rope(make_rope(x, 1, 1, 4, positions, cos_sin, RopeStyle::kNeox)).ok());
    EXPECT_EQ(x, (std::vector<float>{-3, -2, 1, -4}));
  }
}

using RopeParam = std::tuple<RopeStyle, DType>;
class RopeRandom : public ::testing::TestWithParam<RopeParam> {};

TEST_P(RopeRandom, PositionZeroIsIdentity) {
  const auto [style, dtype] = GetParam();
  SCOPED_TRACE(std::string(rope_style_name(style)) + " " + dtype_name(dtype));
  constexpr int64_t kT = 5, kH = 3, kDr = 64;
  std::vector<float> cos_sin = yarn_cos_sin_table(YarnConfig{}, 8);
  std::vector<int64_t> positions(kT, 0);
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> u(-4.0f, 4.0f);
  std::vector<uint16_t> x16(kT * kH * kDr);
  std::vector<float> x32(x16.size());
  for (size_t i = 0; i < x16.size(); ++i) {
    x32[i] = u(rng);
    x16[i] = dtype == DType::kBF16 ? float_to_bf16(x32[i]) : float_to_fp16(x32[i]);
  }
  RopeProblem p = make_rope(x32, kT, kH, kDr, positions, cos_sin, style);
  const std::vector<uint16_t> x16_before = x16;
  const std::vector<float> x32_before = x32;
  if (dtype != DType::kFP32) p.x = TensorView::contiguous(x16.data(), dtype, {kT, kH, kDr});
  ASSERT_TRUE(reference::rope(p).ok());
  EXPECT_EQ(x16, x16_before);
  EXPECT_EQ(x32, x32_before);
}

TEST_P(RopeRandom, MatchesDoubleRotationAndPreservesPairNorms) {
  const auto [style, dtype] = GetParam();
  SCOPED_TRACE(std::string(rope_style_name(style)) + " " + dtype_name(dtype));
  constexpr int64_t kT = 17, kH = 4, kDr = 64, kMaxPos = 200000;
  std::vector<float> cos_sin = yarn_cos_sin_table(YarnConfig{}, kMaxPos);
  std::mt19937 rng(kSeed + 1);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  std::uniform_int_distribution<int64_t> pos_dist(0, kMaxPos - 1);
  std::vector<int64_t> positions(kT);
  for (auto& pos : positions) pos = pos_dist(rng);
  positions[0] = kMaxPos - 1;
  // Inputs are rounded to the storage dtype first, so `before` holds exactly what rope() reads.
  std::vector<float> x32(kT * kH * kDr);
  std::vector<uint16_t> x16(x32.size());
  for (size_t i = 0; i < x32.size(); ++i) {
    x32[i] = u(rng);
    if (dtype == DType::kBF16) x32[i] = bf16_to_float(x16[i] = float_to_bf16(x32[i]));
    if (dtype == DType::kFP16) x32[i] = fp16_to_float(x16[i] = float_to_fp16(x32[i]));
  }
  const std::vector<float> before = x32;
  RopeProblem p = make_rope(x32, kT, kH, kDr, positions, cos_sin, style);
  if (dtype != DType::kFP32) p.x = TensorView::contiguous(x16.data(), dtype, {kT, kH, kDr});
  ASSERT_TRUE(reference::rope(p).ok());
  if (dtype == DType::kBF16)
    for (size_t i = 0; i < x32.size(); ++i) x32[i] = bf16_to_float(x16[i]);
  if (dtype == DType::kFP16)
    for (size_t i = 0; i < x32.size(); ++i) x32[i] = fp16_to_float(x16[i]);
  // Storage rounding of each output: half an ulp, 2^-8 relative for bf16, 2^-11 for fp16, 0 for float32.
  const double store_rel = dtype == DType::kBF16 ? std::ldexp(1.0, -8) : dtype == DType::kFP16 ? std::ldexp(1.0, -11) : 0.0;
  for (int64_t t = 0; t < kT; ++t)
    for (int64_t h = 0; h < kH; ++h)
      for (int i = 0; i < kDr / 2; ++i) {
        const int64_t a = style == RopeStyle::kNeox ? i : 2 * i;
        const int64_t b = style == RopeStyle::kNeox ? i + kDr / 2 : 2 * i + 1;
        const int64_t base = (t * kH + h) * kDr;
        const double xa = before[base + a], xb = before[base + b];
        const double ya = x32[base + a], yb = x32[base + b];
        SCOPED_TRACE("t " + std::to_string(t) + " h " + std::to_string(h) + " pair " + std::to_string(i));
        const double norm_in = std::hypot(xa, xb);
        // Independent rotation in double from the hand-derived frequencies; the table's float32 cos/sin
        // (error <= 6e-8 each) bound the difference by ~2e-7 * |x|, plus the output's storage rounding.
        const double tol = 1e-6 * (1.0 + norm_in) + store_rel * norm_in;
        EXPECT_NEAR(std::hypot(ya, yb), norm_in, 2.0 * tol);
        const double phi = double(positions[t]) * v3_inv_freq(i);
        EXPECT_NEAR(ya, xa * std::cos(phi) - xb * std::sin(phi), tol);
        EXPECT_NEAR(yb, xa * std::sin(phi) + xb * std::cos(phi), tol);
      }
}

INSTANTIATE_TEST_SUITE_P(StylesDtypes, RopeRandom,
                         ::testing::Combine(::testing::Values(RopeStyle::kInterleaved, RopeStyle::kNeox),
                                            ::testing::Values(DType::kFP32, DType::kBF16, DType::kFP16)),
                         [](const ::testing::TestParamInfo<RopeParam>& info) {
                           return std::string(rope_style_name(std::get<0>(info.param))) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

TEST(Rope, PositionOutOfRangeIsRejectedAndWritesNothing) {
  std::vector<float> cos_sin = yarn_cos_sin_table(YarnConfig{}, 16);
  for (int64_t bad : {int64_t{16}, int64_t{-1}, int64_t{1} << 40}) {
    SCOPED_TRACE("position " + std::to_string(bad));
    std::vector<int64_t> positions = {3, bad};  // the good token comes first: it must not be rotated either
    std::vector<float> x(2 * 64, 0.5f);  // position 3 would change these (no pair has phi = 0 mod 2 pi)
    const std::vector<float> before = x;
    const Status s = reference::rope(make_rope(x, 2, 1, 64, positions, cos_sin, RopeStyle::kInterleaved));
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("positions[1]"), std::string::npos) << s.message();
    EXPECT_EQ(x, before);
  }
}

}  // namespace
}  // namespace mlakit
