// Row codecs of docs/spec.md section 4: a hand-derived fp8_ds_mla golden row, the writer's power-of-two scale
// rule, bit-exact agreement with FlashMLA's fp8_ds_mla bytes, and the quantisation error of every format.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/npy.h"
#include "mlakit/kv_format.h"
#include "mlakit/numeric.h"
#include "reference/kv_rows.h"

namespace mlakit {
namespace {

using reference::decode_kv_row;
using reference::encode_kv_row;

constexpr uint64_t kSeed = 4242;
constexpr MlaDims kDsMlaDims{ds_mla::kDimC, ds_mla::kDimR};

/// A one-row cache view: only format, dims and the scale matter to the row codecs.
KvCacheView row_view(KvFormat format, MlaDims dims, float kv_scale = 1.0f) {
  KvCacheView v = KvCacheView::contiguous(nullptr, format, 1, 1, dims);
  v.kv_scale_value = kv_scale;
  return v;
}

void put_f32(std::vector<uint8_t>& bytes, int offset, uint32_t bits) {
  for (int k = 0; k < 4; ++k) bytes[size_t(offset + k)] = uint8_t(bits >> (8 * k));  // little endian
}
void put_u16(std::vector<uint8_t>& bytes, int offset, uint16_t bits) {
  bytes[size_t(offset)] = uint8_t(bits & 0xff);
  bytes[size_t(offset + 1)] = uint8_t(bits >> 8);
}

// ---------------------------------------------------------------------------------------------------------
// Golden row, every byte derived by hand. e4m3 code = sign<<7 | exponent(bias 7)<<3 | mantissa(3 bits).
TEST(KvFormatDsMla, HandDerivedGoldenRow) {
  std::vector<float> x(kDsMlaDims.d_qk(), 0.0f);
  std::vector<uint8_t> expected(ds_mla::kRowBytes, 0x00);  // e4m3 0x00 = +0, bf16 0x0000 = +0

  // Group 0 (kv_c[0,128)): amax 448 -> 448/448 = 1 = 2^0 exactly -> s_0 = 1.0 (float bits 0x3f800000).
  x[0] = 448.0f;    expected[0] = 0x7e;  // 1.75 * 2^8: exp 15, mant 6 -> 0 1111 110
  x[1] = -1.0f;     expected[1] = 0xb8;  // 1 * 2^0: exp 7 -> 1 0111 000
  x[2] = 0.5f;      expected[2] = 0x30;  // 2^-1: exp 6 -> 0 0110 000
  x[3] = 1.0625f;   expected[3] = 0x38;  // halfway 1 .. 1.125: ties to even mantissa 0 -> 1.0
  x[127] = 1.1875f; expected[127] = 0x3a;  // halfway 1.125 .. 1.25: ties to even mantissa 2 -> 1.25
  put_f32(expected, ds_mla::kScaleOffset + 0, 0x3f800000u);

  // Group 1: amax 3 -> 3/448 = 0.0067 lies in (2^-8, 2^-7] -> s_1 = 2^-7 (bits (127-7)<<23 = 0x3c000000).
  x[128] = 3.0f;                 expected[128] = 0x7c;  // 3 / 2^-7 = 384 = 1.5 * 2^8: exp 15, mant 4
  x[129] = -0.75f;               expected[129] = 0xec;  // -96 = -1.5 * 2^6: exp 13, mant 4, sign
  x[130] = std::ldexp(1.0f, -16); expected[130] = 0x01;  // 2^-16 / 2^-7 = 2^-9: smallest subnormal
  x[131] = std::ldexp(1.0f, -17); expected[131] = 0x00;  // 2^-10: halfway 0 .. 2^-9 -> 0 (even)
  put_f32(expected, ds_mla::kScaleOffset + 4, 0x3c000000u);

  // Group 2: all zero -> amax 0, floored at 1e-4; the smallest power of two >= 1e-4 is 2^-13 = 1.22e-4
  // (2^-14 = 6.1e-5 is too small) -> bits (127-13)<<23 = 0x39000000; every code 0x00.
  put_f32(expected, ds_mla::kScaleOffset + 8, 0x39000000u);

  // Group 3: amax 56 -> 56/448 = 0.125 = 2^-3 exactly -> s_3 = 2^-3 (bits 0x3e000000).
  x[384] = 56.0f;  expected[384] = 0x7e;  // 448
  x[385] = -56.0f; expected[385] = 0xfe;
  x[386] = 7.0f;   expected[386] = 0x66;  // 56 = 1.75 * 2^5: exp 12, mant 6
  x[511] = -0.0f;  expected[511] = 0x80;  // negative zero keeps its sign
  put_f32(expected, ds_mla::kScaleOffset + 12, 0x3e000000u);

  // k_pe, bf16, not quantised.
  const int rope = ds_mla::kRopeOffset;
  x[512] = 1.0f;         put_u16(expected, rope + 0, 0x3f80);
  x[513] = -2.0f;        put_u16(expected, rope + 2, 0xc000);
  x[514] = 0.1f;         put_u16(expected, rope + 4, 0x3dcd);  // 0x3dcccccd: dropped 0xcccd > half -> up
  x[515] = 1.00390625f;  put_u16(expected, rope + 6, 0x3f80);  // 1 + 2^-8 = 0x3f808000: tie -> even
  x[575] = -0.0f;        put_u16(expected, rope + 126, 0x8000);

  std::vector<uint8_t> row(ds_mla::kRowBytes, 0xAB);
  encode_kv_row(row_view(KvFormat::kFP8DsMla, kDsMlaDims), x.data(), row.data());
  for (int i = 0; i < ds_mla::kRowBytes; ++i) EXPECT_EQ(int(row[size_t(i)]), int(expected[size_t(i)])) << "byte " << i;

  // Reading it back gives the hand values (all of them are exactly representable after rounding).
  std::vector<float> back(kDsMlaDims.d_qk(), NAN);
  decode_kv_row(row_view(KvFormat::kFP8DsMla, kDsMlaDims), expected.data(), back.data());
  EXPECT_EQ(back[0], 448.0f);
  EXPECT_EQ(back[3], 1.0f);
  EXPECT_EQ(back[127], 1.25f);
  EXPECT_EQ(back[129], -0.75f);
  EXPECT_EQ(back[131], 0.0f);
  EXPECT_EQ(back[386], 7.0f);
  EXPECT_EQ(back[514], 0.10009765625f);  // bf16 0x3dcd
  EXPECT_EQ(back[256], 0.0f);
}

TEST(KvFormatDsMla, ReaderAcceptsAnyFloatScale) {
  // Scales that are not powers of two (another writer's choice) are multiplied in float32 as stored.
  const float scales[ds_mla::kNumGroups] = {0.3f, 1.7e-3f, 123.25f, -2.0f};
  std::vector<uint8_t> row(ds_mla::kRowBytes, 0);
  std::memcpy(row.data() + ds_mla::kScaleOffset, scales, sizeof scales);
  for (int g = 0; g < ds_mla::kNumGroups; ++g) row[size_t(g * ds_mla::kGroupSize + 5)] = 0x3c;  // 1.5
  std::vector<float> out(kDsMlaDims.d_qk(), NAN);
  decode_kv_row(row_view(KvFormat::kFP8DsMla, kDsMlaDims), row.data(), out.data());
  for (int g = 0; g < ds_mla::kNumGroups; ++g) {
    EXPECT_EQ(out[size_t(g * ds_mla::kGroupSize + 5)], 1.5f * scales[g]) << "group " << g;
    EXPECT_EQ(out[size_t(g * ds_mla::kGroupSize + 6)], 0.0f) << "group " << g;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Writer scale rule: smallest power of two >= max(amax / 448, 1e-4), checked against a doubling loop in
// double for amax on both sides of every binade edge 448 * 2^k.
TEST(KvFormatDsMla, ScaleIsSmallestPowerOfTwoAboveAmaxOver448) {
  std::vector<float> amaxes = {0.0f, 1e-30f, 0.0448f, 0.04479f, 0.04481f, 1e-4f * 448.0f, 3.0e38f / 1e10f};
  for (int k = -24; k <= 24; ++k) {
    const float edge = std::ldexp(448.0f, k);
    amaxes.push_back(edge);
    amaxes.push_back(std::nextafter(edge, 0.0f));
    amaxes.push_back(std::nextafter(edge, INFINITY));
  }
  std::mt19937 rng(kSeed);
  std::uniform_real_distribution<float> log2_mag(-30.0f, 30.0f);
  for (int i = 0; i < 2000; ++i) amaxes.push_back(std::exp2(log2_mag(rng)));

  const KvCacheView view = row_view(KvFormat::kFP8DsMla, kDsMlaDims);
  for (float amax : amaxes) {
    SCOPED_TRACE("amax " + std::to_string(amax));
    double want = 1.0;
    const double target = std::max(double(amax) / 448.0, 1e-4);
    while (want < target) want *= 2.0;
    while (want / 2.0 >= target) want /= 2.0;
    for (int g = 0; g < ds_mla::kNumGroups; ++g) {
      std::vector<float> x(kDsMlaDims.d_qk(), 0.0f);
      x[size_t(g * ds_mla::kGroupSize + 17)] = (g % 2) ? -amax : amax;  // amax is |x|
      x[size_t(g * ds_mla::kGroupSize + 18)] = amax * 0.25f;
      std::vector<uint8_t> row(ds_mla::kRowBytes);
      encode_kv_row(view, x.data(), row.data());
      float scale[ds_mla::kNumGroups];
      std::memcpy(scale, row.data() + ds_mla::kScaleOffset, sizeof scale);
      ASSERT_EQ(double(scale[g]), want) << "group " << g;
      for (int other = 0; other < ds_mla::kNumGroups; ++other)
        if (other != g) {
          ASSERT_EQ(double(scale[other]), std::ldexp(1.0, -13)) << "zero group " << other;
        }
      // amax / s_g lands in (224, 448] unless the 1e-4 floor applies: the e4m3 range is used fully.
      const uint8_t top = row[size_t(g * ds_mla::kGroupSize + 17)] & 0x7f;
      if (double(amax) / 448.0 > 1e-4) {
        ASSERT_GE(e4m3_to_float(top), 224.0f);
      }
      ASSERT_LE(e4m3_to_float(top), 448.0f);
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// FlashMLA's own fp8_ds_mla bytes (testdata/flashmla/sparse_*): re-encoding kv_bf16 must reproduce them.
std::string flashmla_dir() { return std::string(MLAKIT_TESTDATA_DIR) + "/flashmla"; }

class FlashMlaRows : public ::testing::TestWithParam<const char*> {};

TEST_P(FlashMlaRows, EncodeReproducesFlashMlaBytesExactly) {
  const std::string dir = flashmla_dir() + "/" + GetParam();
  if (!std::filesystem::exists(dir)) GTEST_SKIP() << "golden vectors not found at " << dir;
  test::NpyArray kv_bf16, kv_cache;
  std::string err;
  ASSERT_TRUE(test::load_npy_checked(dir + "/kv_bf16.npy", "<u2", {}, &kv_bf16, &err)) << err;
  ASSERT_TRUE(test::load_npy_checked(dir + "/kv_cache.npy", "|u1", {}, &kv_cache, &err)) << err;
  // [num_pages, 64, 1, 576] bf16 bits and [num_pages, 64, 1, 656] bytes.
  ASSERT_EQ(kv_bf16.shape.size(), 4u);
  ASSERT_EQ(kv_bf16.shape.back(), kDsMlaDims.d_qk());
  ASSERT_EQ(kv_cache.shape.size(), 4u);
  ASSERT_EQ(kv_cache.shape.back(), ds_mla::kRowBytes);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(kv_bf16.shape[size_t(i)], kv_cache.shape[size_t(i)]);
  const int64_t num_rows = kv_bf16.numel() / kDsMlaDims.d_qk();
  ASSERT_GT(num_rows, 0);

  const KvCacheView view = row_view(KvFormat::kFP8DsMla, kDsMlaDims);
  std::vector<float> x(kDsMlaDims.d_qk());
  std::vector<uint8_t> row(ds_mla::kRowBytes);
  std::vector<float> back(kDsMlaDims.d_qk());
  int64_t bad_rows = 0;
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int i = 0; i < kDsMlaDims.d_qk(); ++i) x[size_t(i)] = bf16_to_float(kv_bf16.at<uint16_t>(r * kDsMlaDims.d_qk() + i));
    encode_kv_row(view, x.data(), row.data());
    const uint8_t* golden = kv_cache.data.data() + r * ds_mla::kRowBytes;
    if (std::memcmp(row.data(), golden, ds_mla::kRowBytes) != 0) {
      if (++bad_rows <= 3) {
        int first = 0;
        while (row[size_t(first)] == golden[first]) ++first;
        ADD_FAILURE() << "row " << r << " differs first at byte " << first << ": ours " << int(row[size_t(first)])
                      << ", FlashMLA " << int(golden[first]);
      }
    }
    // Reader side: FlashMLA's row decodes to the bf16 input within e4m3's half step (2^-4 relative,
    // 2^-10 * s_g below the normal range), and k_pe exactly.
    decode_kv_row(view, golden, back.data());
    float scale[ds_mla::kNumGroups];
    std::memcpy(scale, golden + ds_mla::kScaleOffset, sizeof scale);
    for (int i = 0; i < kDsMlaDims.d_qk(); ++i) {
      const float bound = i < ds_mla::kDimC ? std::ldexp(std::fabs(x[size_t(i)]), -4) +
                                                   std::ldexp(scale[i / ds_mla::kGroupSize], -10)
                                             : 0.0f;
      if (!(std::fabs(back[size_t(i)] - x[size_t(i)]) <= bound)) {
        ADD_FAILURE() << "row " << r << " col " << i << ": decoded " << back[size_t(i)] << ", input " << x[size_t(i)];
        break;
      }
    }
  }
  EXPECT_EQ(bad_rows, 0) << "of " << num_rows << " rows";
}

INSTANTIATE_TEST_SUITE_P(SparseCases, FlashMlaRows,
                         ::testing::Values("sparse_b1_sq1_h128_topk256", "sparse_b2_sq2_h64_topk128"));

// ---------------------------------------------------------------------------------------------------------
// Quantisation error of encode -> decode per format (docs/spec.md section 10, last item). Bounds are half a step
// of round-to-nearest: bf16 2^-8 relative, fp16 2^-11 relative (+2^-25 for subnormals), e4m3 2^-4 relative
// after scaling (+2^-10 * scale below its normal range 2^-6).

struct FormatCase {
  KvFormat format;
  MlaDims dims;
  float kv_scale;
};
using QuantParam = std::tuple<FormatCase, float>;  // format, input magnitude

class QuantisationError : public ::testing::TestWithParam<QuantParam> {};

TEST_P(QuantisationError, WithinHalfStepOfFormat) {
  const auto [fc, magnitude] = GetParam();
  SCOPED_TRACE(std::string(kv_format_name(fc.format)) + " d_c=" + std::to_string(fc.dims.d_c) + " d_r=" +
               std::to_string(fc.dims.d_r) + " kv_scale=" + std::to_string(fc.kv_scale) +
               " magnitude=" + std::to_string(magnitude));
  const KvCacheView view = row_view(fc.format, fc.dims, fc.kv_scale);
  const int d_qk = fc.dims.d_qk();
  std::mt19937 rng(kSeed + uint64_t(magnitude * 1000));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::uniform_real_distribution<float> log2_spread(-12.0f, 0.0f);
  constexpr int kRows = 64;
  std::vector<uint8_t> row(size_t(view.row_bytes()));
  std::vector<float> x(static_cast<size_t>(d_qk)), back(static_cast<size_t>(d_qk));
  for (int r = 0; r < kRows; ++r) {
    // Values spread over 12 binades below `magnitude`, so small values next to large ones are covered.
    for (auto& v : x) v = magnitude * u(rng) * std::exp2(log2_spread(rng));
    encode_kv_row(view, x.data(), row.data());
    std::fill(back.begin(), back.end(), NAN);
    decode_kv_row(view, row.data(), back.data());
    float ds_scale[ds_mla::kNumGroups] = {};
    if (fc.format == KvFormat::kFP8DsMla) std::memcpy(ds_scale, row.data() + ds_mla::kScaleOffset, sizeof ds_scale);
    for (int i = 0; i < d_qk; ++i) {
      const double ax = std::fabs(double(x[size_t(i)]));
      double bound = 0.0;
      switch (fc.format) {
        case KvFormat::kBF16: bound = std::ldexp(ax, -8); break;
        case KvFormat::kFP16: bound = std::ldexp(ax, -11) + std::ldexp(1.0, -25); break;
        case KvFormat::kFP8E4M3: bound = std::ldexp(ax, -4) + std::ldexp(double(fc.kv_scale), -10); break;
        case KvFormat::kFP8DsMla:
          bound = i < ds_mla::kDimC ? std::ldexp(ax, -4) + std::ldexp(double(ds_scale[i / ds_mla::kGroupSize]), -10)
                                    : std::ldexp(ax, -8);  // k_pe is bf16
          break;
        case KvFormat::kFP8DsV4: break;  // not a row format: test_ds_v4.cpp
      }
      const double err = std::fabs(double(back[size_t(i)]) - double(x[size_t(i)]));
      ASSERT_LE(err, bound) << "row " << r << " col " << i << " x=" << x[size_t(i)] << " got " << back[size_t(i)];
    }
  }
}

// e4m3 per-tensor scales are chosen so |x| / kv_scale stays below 448 (no saturation): magnitude <= 8.
INSTANTIATE_TEST_SUITE_P(
    Formats, QuantisationError,
    ::testing::Combine(::testing::Values(FormatCase{KvFormat::kBF16, {512, 64}, 1.0f},
                                         FormatCase{KvFormat::kBF16, {256, 32}, 1.0f},
                                         FormatCase{KvFormat::kFP16, {512, 64}, 1.0f},
                                         FormatCase{KvFormat::kFP16, {128, 0}, 1.0f},
                                         FormatCase{KvFormat::kFP8E4M3, {512, 64}, 1.0f},
                                         FormatCase{KvFormat::kFP8E4M3, {512, 64}, 0.02f},
                                         FormatCase{KvFormat::kFP8E4M3, {256, 32}, 0.75f},
                                         FormatCase{KvFormat::kFP8DsMla, {512, 64}, 1.0f}),
                       ::testing::Values(1e-3f, 1.0f, 8.0f)),
    [](const ::testing::TestParamInfo<QuantParam>& info) {
      const FormatCase& fc = std::get<0>(info.param);
      const float mag = std::get<1>(info.param);
      return std::string(kv_format_name(fc.format)) + "_dc" + std::to_string(fc.dims.d_c) + "_dr" +
             std::to_string(fc.dims.d_r) + "_scale" + std::to_string(int(fc.kv_scale * 100)) + "em2_mag" +
             std::to_string(int(mag * 1000)) + "em3";
    });

TEST(KvFormatE4m3, ScalePointerWinsOverValue) {
  const float device_scale = 2.0f;
  KvCacheView view = row_view(KvFormat::kFP8E4M3, {4, 2}, 1.0f);
  view.kv_scale = &device_scale;
  EXPECT_EQ(reference::kv_scale_of(view), 2.0f);
  const float x[6] = {3.0f, -1.0f, 896.0f, 1000.0f, 0.25f, 0.0f};
  uint8_t row[6];
  encode_kv_row(view, x, row);
  // x / 2: 1.5 -> 0x3c, -0.5 -> 0xb0, 448 -> 0x7e, 500 saturates -> 0x7e, 0.125 -> 0x20, 0 -> 0x00
  const uint8_t expected[6] = {0x3c, 0xb0, 0x7e, 0x7e, 0x20, 0x00};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(int(row[i]), int(expected[i])) << i;
  float back[6];
  decode_kv_row(view, row, back);
  const float expected_back[6] = {3.0f, -1.0f, 896.0f, 896.0f, 0.25f, 0.0f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(back[i], expected_back[i]) << i;
}

}  // namespace
}  // namespace mlakit
