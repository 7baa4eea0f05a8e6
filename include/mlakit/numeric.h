#pragma once
/// @file numeric.h
/// The one definition of every 16- and 8-bit float conversion MLAKit uses, callable from host code and
/// from CUDA kernels. All narrowing conversions round to nearest, ties to even; e4m3 saturates to +-448
/// (the "satfinite" rule of docs/spec.md section 4). NaN stays NaN.

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MLAKIT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define MLAKIT_HOST_DEVICE inline
#endif

namespace mlakit {

MLAKIT_HOST_DEVICE uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
MLAKIT_HOST_DEVICE float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

// ---- bf16: the top 16 bits of a float32 ----
MLAKIT_HOST_DEVICE float bf16_to_float(uint16_t h) { return bits_float(uint32_t(h) << 16); }

MLAKIT_HOST_DEVICE uint16_t float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round half to even on the 16 dropped bits
  return uint16_t(u >> 16);
}

// ---- fp16 (IEEE binary16) ----
MLAKIT_HOST_DEVICE float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24
    const float v = float(man) * 5.9604644775390625e-8f;
    return bits_float(float_bits(v) | sign);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));  // inf or NaN
  return bits_float(sign | ((exp + 112u) << 23) | (man << 13));        // rebias 15 -> 127
}

MLAKIT_HOST_DEVICE uint16_t float_to_fp16(float f) {
  uint32_t x = float_bits(f);
  const uint16_t sign = uint16_t((x >> 16) & 0x8000u);
  x &= 0x7fffffffu;
  if (x > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (x >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (x < 0x38800000u) {                                   // below 2^-14: fp16 subnormal or zero
    if (x <= 0x33000000u) return sign;                     // <= 2^-25 rounds to zero (tie to even)
    const uint32_t e = x >> 23;
    const uint32_t m = (x & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // value / 2^-24 = m * 2^(e - 126)
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  const uint32_t r = x + 0xfffu + ((x >> 13) & 1u) - 0x38000000u;  // round 23 -> 10 bits, rebias
  return uint16_t(sign | (r >> 13));
}

// ---- fp8 e4m3 (OCP "fn": bias 7, no inf, NaN = S.1111.111, max 448) ----
inline constexpr float kE4M3Max = 448.0f;

MLAKIT_HOST_DEVICE float e4m3_to_float(uint8_t b) {
  const float sign = (b & 0x80u) ? -1.0f : 1.0f;
  const int exp = (b >> 3) & 0xf;
  const int man = b & 0x7;
  if (exp == 0xf && man == 0x7) return bits_float(0x7fc00000u);
  if (exp == 0) return sign * float(man) * 0.001953125f;  // subnormal: man * 2^-9
  return sign * ldexpf(1.0f + float(man) * 0.125f, exp - 7);
}

MLAKIT_HOST_DEVICE uint8_t float_to_e4m3(float f) {
  if (f != f) return 0x7f;
  const uint8_t sign = (float_bits(f) >> 24) & 0x80u;
  const float a = fabsf(f);
  if (a >= kE4M3Max) return uint8_t(sign | 0x7e);  // satfinite: +-448, infinities included
  if (a < 0.015625f) {                              // below 2^-6: subnormal steps of 2^-9
    const float r = rintf(a * 512.0f);              // r == 8 encodes 2^-6, the smallest normal
    return uint8_t(sign | uint8_t(r));
  }
  int e;
  const float frac = frexpf(a, &e);               // a = frac * 2^e, frac in [0.5, 1)
  float m = rintf((frac * 2.0f - 1.0f) * 8.0f);   // 3 mantissa bits of a / 2^(e-1)
  int biased = e - 1 + 7;
  if (m == 8.0f) {  // mantissa rounded up into the next binade
    m = 0.0f;
    ++biased;
  }
  return uint8_t(sign | uint8_t(biased << 3) | uint8_t(m));
}

}  // namespace mlakit
