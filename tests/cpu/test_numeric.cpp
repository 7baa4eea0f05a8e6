// numeric.h against independent definitions: every code of bf16, fp16 and e4m3 is decoded with a formula
// written from the bit fields here, re-encoded, and every midpoint between neighbouring codes is checked
// for round-to-nearest-even; random floats are checked against a brute-force nearest-code oracle.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "mlakit/numeric.h"

namespace mlakit {
namespace {

constexpr uint64_t kSeed = 20261122;
constexpr int kRandomSamples = 200000;

// ---- independent decoders: value from sign, exponent and mantissa fields, in double ----

double field_value(uint32_t code, int exp_bits, int man_bits, int bias, bool has_inf) {
  const uint32_t sign = code >> (exp_bits + man_bits);
  const uint32_t e = (code >> man_bits) & ((1u << exp_bits) - 1u);
  const uint32_t m = code & ((1u << man_bits) - 1u);
  const uint32_t e_max = (1u << exp_bits) - 1u;
  double mag;
  if (has_inf && e == e_max) {
    mag = m == 0 ? std::numeric_limits<double>::infinity() : std::numeric_limits<double>::quiet_NaN();
  } else if (!has_inf && e == e_max && m == (1u << man_bits) - 1u) {
    mag = std::numeric_limits<double>::quiet_NaN();  // e4m3 "fn": only S.1111.111 is NaN, no infinity
  } else if (e == 0) {
    mag = std::ldexp(double(m), 1 - bias - man_bits);  // subnormal: m * 2^(1 - bias - man_bits)
  } else {
    mag = std::ldexp(double((1u << man_bits) + m), int(e) - bias - man_bits);
  }
  return sign ? -mag : mag;
}

// ---- one description per format, so the properties below are written once ----

struct Format {
  const char* name;
  int exp_bits, man_bits, bias;
  bool has_inf;             // IEEE-style infinity (bf16, fp16); e4m3 saturates instead
  uint32_t max_finite;      // largest positive finite code; codes [0, max_finite] increase with value
  uint32_t inf_code;        // positive infinity (has_inf only)
  double next_after_max;    // the value the next code would have with an unbounded exponent
  float (*decode)(uint32_t);
  uint32_t (*encode)(float);

  uint32_t sign_bit() const { return 1u << (exp_bits + man_bits); }
  uint32_t num_codes() const { return 2u * sign_bit(); }
  double reference(uint32_t c) const { return field_value(c, exp_bits, man_bits, bias, has_inf); }
};

const Format kBf16{"bf16", 8, 7, 127, true, 0x7f7fu, 0x7f80u, std::ldexp(1.0, 128),
                   [](uint32_t c) { return bf16_to_float(uint16_t(c)); },
                   [](float f) { return uint32_t(float_to_bf16(f)); }};
const Format kFp16{"fp16", 5, 10, 15, true, 0x7bffu, 0x7c00u, 65536.0,
                   [](uint32_t c) { return fp16_to_float(uint16_t(c)); },
                   [](float f) { return uint32_t(float_to_fp16(f)); }};
const Format kE4m3{"e4m3", 4, 3, 7, false, 0x7eu, 0u, 480.0,
                   [](uint32_t c) { return e4m3_to_float(uint8_t(c)); },
                   [](float f) { return uint32_t(float_to_e4m3(f)); }};

bool same_double(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

/// Brute-force oracle: the code nearest to x (ties to the even code), found by bisection over the sorted
/// positive codes; saturating to max_finite (e4m3) or rounding to infinity past the last midpoint.
uint32_t nearest_code(const Format& fmt, double x) {
  const uint32_t sign = std::signbit(x) ? fmt.sign_bit() : 0u;
  const double a = std::fabs(x);
  if (std::isinf(a)) return sign | (fmt.has_inf ? fmt.inf_code : fmt.max_finite);
  uint32_t lo = 0, hi = fmt.max_finite;  // largest c with value(c) <= a
  while (lo < hi) {
    const uint32_t mid = (lo + hi + 1) / 2;
    if (fmt.reference(mid) <= a) lo = mid; else hi = mid - 1;
  }
  const double below = fmt.reference(lo);
  const double above = lo == fmt.max_finite ? fmt.next_after_max : fmt.reference(lo + 1);
  uint32_t pick;
  if (a - below < above - a) pick = lo;
  else if (a - below > above - a) pick = lo + 1;
  else pick = (lo % 2 == 0) ? lo : lo + 1;
  if (pick > fmt.max_finite) pick = fmt.has_inf ? fmt.inf_code : fmt.max_finite;
  if (!fmt.has_inf && a > fmt.reference(fmt.max_finite)) pick = fmt.max_finite;  // satfinite
  return sign | pick;
}

class NumericFormat : public ::testing::TestWithParam<Format> {};

TEST_P(NumericFormat, DecodeMatchesFieldFormulaForEveryCode) {
  const Format& fmt = GetParam();
  for (uint32_t c = 0; c < fmt.num_codes(); ++c) {
    SCOPED_TRACE(std::string(fmt.name) + " code " + std::to_string(c));
    ASSERT_TRUE(same_double(fmt.decode(c), fmt.reference(c))) << fmt.decode(c) << " vs " << fmt.reference(c);
  }
}

TEST_P(NumericFormat, PositiveCodesIncreaseStrictly) {
  const Format& fmt = GetParam();
  for (uint32_t c = 0; c < fmt.max_finite; ++c) ASSERT_LT(fmt.decode(c), fmt.decode(c + 1)) << fmt.name << " " << c;
}

TEST_P(NumericFormat, EncodeOfDecodeIsIdentityForEveryNonNanCode) {
  const Format& fmt = GetParam();
  for (uint32_t c = 0; c < fmt.num_codes(); ++c) {
    const float v = fmt.decode(c);
    SCOPED_TRACE(std::string(fmt.name) + " code " + std::to_string(c));
    if (std::isnan(v)) {
      ASSERT_TRUE(std::isnan(fmt.decode(fmt.encode(v))));
    } else {
      ASSERT_EQ(fmt.encode(v), c) << "value " << v;  // includes -0 -> sign code
    }
  }
}

TEST_P(NumericFormat, MidpointsRoundToEvenAndNeighboursToNearest) {
  const Format& fmt = GetParam();
  for (uint32_t c = 0; c < fmt.max_finite; ++c) {
    const double mid = 0.5 * (fmt.reference(c) + fmt.reference(c + 1));
    const float mid_f = static_cast<float>(mid);
    ASSERT_EQ(double(mid_f), mid) << "midpoint must be exact in float32";
    const uint32_t even = (c % 2 == 0) ? c : c + 1;
    SCOPED_TRACE(std::string(fmt.name) + " between codes " + std::to_string(c) + " and " + std::to_string(c + 1));
    EXPECT_EQ(fmt.encode(mid_f), even);
    EXPECT_EQ(fmt.encode(-mid_f), fmt.sign_bit() | even);
    EXPECT_EQ(fmt.encode(std::nextafter(mid_f, 0.0f)), c);
    EXPECT_EQ(fmt.encode(std::nextafter(mid_f, std::numeric_limits<float>::infinity())), c + 1);
  }
}

TEST_P(NumericFormat, OverflowRoundsToInfinityOrSaturates) {
  const Format& fmt = GetParam();
  const float inf = std::numeric_limits<float>::infinity();
  const uint32_t top = fmt.has_inf ? fmt.inf_code : fmt.max_finite;
  // The midpoint between the largest finite value and the next (virtual) one ties to the even side:
  // the virtual code max_finite + 1 is even for all three formats, so IEEE formats overflow there.
  const float last_mid = static_cast<float>(0.5 * (fmt.reference(fmt.max_finite) + fmt.next_after_max));
  SCOPED_TRACE(fmt.name);
  EXPECT_EQ(fmt.encode(last_mid), top);
  EXPECT_EQ(fmt.encode(-last_mid), fmt.sign_bit() | top);
  EXPECT_EQ(fmt.encode(std::nextafter(last_mid, 0.0f)), fmt.max_finite);
  EXPECT_EQ(fmt.encode(inf), top);
  EXPECT_EQ(fmt.encode(-inf), fmt.sign_bit() | top);
  EXPECT_EQ(fmt.encode(std::numeric_limits<float>::max()), top);
  if (!fmt.has_inf) {  // satfinite: anything above the largest finite value clamps to it
    const float above = std::nextafter(static_cast<float>(fmt.reference(fmt.max_finite)), inf);
    EXPECT_EQ(fmt.encode(above), fmt.max_finite);
    EXPECT_EQ(fmt.encode(-above), fmt.sign_bit() | fmt.max_finite);
  }
}

TEST_P(NumericFormat, NanStaysNan) {
  const Format& fmt = GetParam();
  // quiet, negative quiet, signalling (payload only in the low bits: plain truncation would give inf)
  const uint32_t patterns[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu};
  for (uint32_t bits : patterns) {
    SCOPED_TRACE(std::string(fmt.name) + " float bits " + std::to_string(bits));
    EXPECT_TRUE(std::isnan(fmt.decode(fmt.encode(bits_float(bits)))));
  }
}

TEST_P(NumericFormat, RandomFloatsMatchNearestCodeOracle) {
  const Format& fmt = GetParam();
  std::mt19937_64 rng(kSeed);
  std::uniform_int_distribution<uint32_t> any_bits;
  // Half the samples are arbitrary float bit patterns, half are spread log-uniformly over the format's
  // range (subnormals to overflow) where every rounding decision is non-trivial.
  const double min_sub = fmt.reference(1), max_val = fmt.next_after_max;
  std::uniform_real_distribution<double> log_mag(std::log2(min_sub) - 2, std::log2(max_val) + 1);
  for (int s = 0; s < kRandomSamples; ++s) {
    float x;
    if (s % 2 == 0) {
      x = bits_float(any_bits(rng));
      if (std::isnan(x)) continue;
    } else {
      x = static_cast<float>(std::exp2(log_mag(rng)));
      if (any_bits(rng) & 1u) x = -x;
    }
    ASSERT_EQ(fmt.encode(x), nearest_code(fmt, x)) << fmt.name << " x=" << x << " bits=" << float_bits(x);
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, NumericFormat, ::testing::Values(kBf16, kFp16, kE4m3),
                         [](const ::testing::TestParamInfo<Format>& info) { return std::string(info.param.name); });

// ---- hand-checked anchors, independent of the tables above ----

TEST(NumericE4m3, AnchorValues) {
  EXPECT_EQ(e4m3_to_float(0x38), 1.0f);         // exponent 7 = bias, mantissa 0
  EXPECT_EQ(e4m3_to_float(0x40), 2.0f);
  EXPECT_EQ(e4m3_to_float(0x3f), 1.875f);
  EXPECT_EQ(e4m3_to_float(0x7e), 448.0f);       // 1.75 * 2^8
  EXPECT_EQ(e4m3_to_float(0xfe), -448.0f);
  EXPECT_EQ(e4m3_to_float(0x08), 0.015625f);    // smallest normal 2^-6
  EXPECT_EQ(e4m3_to_float(0x01), 0.001953125f); // smallest subnormal 2^-9
  EXPECT_TRUE(std::isnan(e4m3_to_float(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_float(0xff)));
  EXPECT_TRUE(std::signbit(e4m3_to_float(0x80)) && e4m3_to_float(0x80) == 0.0f);
  EXPECT_EQ(kE4M3Max, 448.0f);
}

TEST(NumericE4m3, AnchorRounding) {
  EXPECT_EQ(float_to_e4m3(1.0625f), 0x38);   // halfway 1 .. 1.125 -> mantissa 0 (even)
  EXPECT_EQ(float_to_e4m3(1.1875f), 0x3a);   // halfway 1.125 .. 1.25 -> mantissa 2 (even)
  EXPECT_EQ(float_to_e4m3(0.0009765625f), 0x00);  // 2^-10, halfway 0 .. 2^-9 -> 0
  EXPECT_EQ(float_to_e4m3(0.0029296875f), 0x02);  // 3 * 2^-10, halfway 2^-9 .. 2^-8 -> 2 * 2^-9
  EXPECT_EQ(float_to_e4m3(0.0146484375f), 0x08);  // 7.5 * 2^-9 -> 2^-6 (subnormal carries into normal)
  EXPECT_EQ(float_to_e4m3(464.0f), 0x7e);    // would be the tie 448 .. 480: saturates
  EXPECT_EQ(float_to_e4m3(-500.0f), 0xfe);
  EXPECT_EQ(float_to_e4m3(1e-12f), 0x00);
  EXPECT_EQ(float_to_e4m3(-1e-12f), 0x80);
  EXPECT_EQ(float_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(float_to_e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_EQ(float_to_e4m3(std::numeric_limits<float>::quiet_NaN()) & 0x7f, 0x7f);
}

TEST(NumericFp16, AnchorSubnormalsAndOverflow) {
  const float two_m24 = std::ldexp(1.0f, -24);
  EXPECT_EQ(float_to_fp16(two_m24), 0x0001);               // smallest subnormal
  EXPECT_EQ(float_to_fp16(0.5f * two_m24), 0x0000);        // tie 0 .. 2^-24 -> 0
  EXPECT_EQ(float_to_fp16(0.75f * two_m24), 0x0001);
  EXPECT_EQ(float_to_fp16(1.5f * two_m24), 0x0002);        // tie 1 .. 2 -> 2
  EXPECT_EQ(float_to_fp16(2.5f * two_m24), 0x0002);        // tie 2 .. 3 -> 2
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14)), 0x0400); // smallest normal
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -14) - 0.5f * two_m24), 0x0400);  // tie 0x3ff .. 0x400 -> even
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // tie 65504 .. 65536 -> even (= inf)
  EXPECT_EQ(float_to_fp16(-1e6f), 0xfc00);
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(fp16_to_float(0x3555), 0.333251953125f);
}

TEST(NumericBf16, AnchorRounding) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808000u)), 0x3f80);  // tie, even mantissa kept
  EXPECT_EQ(float_to_bf16(bits_float(0x3f818000u)), 0x3f82);  // tie, odd mantissa rounds up
  EXPECT_EQ(float_to_bf16(bits_float(0x3f808001u)), 0x3f81);
  EXPECT_EQ(float_to_bf16(bits_float(0x00008000u)), 0x0000);  // subnormal tie to even
  EXPECT_EQ(float_to_bf16(bits_float(0x00018000u)), 0x0002);
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f8000u)), 0x7f80);  // tie above max finite -> inf
  EXPECT_EQ(float_to_bf16(bits_float(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(float_to_bf16(bits_float(0x7f800001u)) & 0x7fff, 0x7fc0);  // signalling NaN stays NaN, quieted
}

}  // namespace
}  // namespace mlakit
