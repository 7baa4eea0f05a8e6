#pragma once
// Device-side element conversions of the cache kernels. Every function returns exactly the bits of its
// numeric.h twin (the one definition the CPU reference uses), so a cache written on the GPU decodes the
// same everywhere. Where Hopper/Ada have a conversion instruction it is used, because numeric.h's portable
// e4m3 encoder costs ~25 instructions per element and the e4m3 writer would otherwise be issue-bound
// (576 conversions per 576-byte row); NaN inputs, the only inputs where the instruction and numeric.h
// disagree on bits, are patched to numeric.h's NaN. tests/gpu/test_cache_convert.cu checks every one of
// the 2^32 float inputs (and all 2^16 / 2^8 codes of the decoders) against numeric.h on the device.

#include <cuda_fp16.h>

#include <cstdint>

#include "mlakit/numeric.h"

// cvt.rn.satfinite.e4m3x2.f32 and cvt.rn.f16x2.e4m3x2 exist from sm_89 (PTX ISA 7.8).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
#define MLAKIT_CACHE_HW_FP8 1
#else
#define MLAKIT_CACHE_HW_FP8 0
#endif

namespace mlakit::cuda::cache {

inline constexpr uint8_t kE4M3NaN = 0x7f;        // numeric.h's float_to_e4m3(NaN)
inline constexpr uint32_t kFloatQuietNaN = 0x7fc00000u;  // numeric.h's e4m3_to_float(NaN)

/// numeric.h float_to_e4m3 of two values: low byte = e4m3(lo), high byte = e4m3(hi).
__device__ __forceinline__ uint16_t e4m3x2_from_float(float lo, float hi) {
#if MLAKIT_CACHE_HW_FP8
  uint16_t r;
  // RNE with satfinite: +-inf and |x| >= 448 saturate to +-448 exactly like numeric.h.
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  if (lo != lo) r = uint16_t((r & 0xff00u) | kE4M3NaN);
  if (hi != hi) r = uint16_t((r & 0x00ffu) | (uint16_t(kE4M3NaN) << 8));
  return r;
#else
  return uint16_t(float_to_e4m3(lo) | (uint16_t(float_to_e4m3(hi)) << 8));
#endif
}

/// numeric.h float_to_e4m3.
__device__ __forceinline__ uint8_t e4m3_from_float(float x) { return uint8_t(e4m3x2_from_float(x, 0.0f)); }

/// numeric.h e4m3_to_float of the two bytes of `v` (low byte first).
__device__ __forceinline__ float2 float2_from_e4m3x2(uint16_t v) {
#if MLAKIT_CACHE_HW_FP8
  uint32_t h2;
  // Every e4m3 value is exact in fp16 (4-bit exponent, 3-bit mantissa), so e4m3 -> fp16 -> fp32 is exact.
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(v));
  const __half2 h = *reinterpret_cast<const __half2*>(&h2);
  float2 f = __half22float2(h);
  if ((v & 0x7fu) == 0x7fu) f.x = bits_float(kFloatQuietNaN);
  if ((v & 0x7f00u) == 0x7f00u) f.y = bits_float(kFloatQuietNaN);
  return f;
#else
  return make_float2(e4m3_to_float(uint8_t(v & 0xffu)), e4m3_to_float(uint8_t(v >> 8)));
#endif
}

/// numeric.h e4m3_to_float.
__device__ __forceinline__ float float_from_e4m3(uint8_t v) { return float2_from_e4m3x2(v).x; }

/// numeric.h fp16_to_float: the instruction is exact for every non-NaN half; NaN payloads follow numeric.h.
__device__ __forceinline__ float float_from_fp16(uint16_t h) {
  if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0u) return fp16_to_float(h);
  return __half2float(__ushort_as_half(h));
}

/// numeric.h float_to_fp16: the instruction rounds to nearest even and overflows to inf like numeric.h.
__device__ __forceinline__ uint16_t fp16_from_float(float f) {
  if (f != f) return float_to_fp16(f);
  return __half_as_ushort(__float2half_rn(f));
}

/// numeric.h bf16 conversions (already a handful of integer instructions).
__device__ __forceinline__ float float_from_bf16(uint16_t h) { return bf16_to_float(h); }
__device__ __forceinline__ uint16_t bf16_from_float(float f) { return float_to_bf16(f); }

/// numeric.h float_to_bf16 of two values (low half = lo): one round-to-nearest-even instruction for both,
/// exact for every non-NaN input; NaN inputs take numeric.h's quieting rule.
__device__ __forceinline__ uint32_t bf16x2_from_float2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  if (lo != lo || hi != hi) r = uint32_t(float_to_bf16(lo)) | (uint32_t(float_to_bf16(hi)) << 16);
  return r;
}

/// bf16x2_from_float2 where a NaN may come out as any NaN (readers that only promise "NaN stays NaN").
__device__ __forceinline__ uint32_t bf16x2_from_float2_any_nan(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}

/// e4m3 of two values where a NaN may come out as any e4m3 NaN code.
__device__ __forceinline__ uint16_t e4m3x2_from_float_any_nan(float lo, float hi) {
#if MLAKIT_CACHE_HW_FP8
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return uint16_t(float_to_e4m3(lo) | (uint16_t(float_to_e4m3(hi)) << 8));
#endif
}

/// e4m3 decode of two codes where a NaN code may come out as any float NaN.
__device__ __forceinline__ float2 float2_from_e4m3x2_any_nan(uint16_t v) {
#if MLAKIT_CACHE_HW_FP8
  uint32_t h2;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(v));
  return __half22float2(*reinterpret_cast<const __half2*>(&h2));
#else
  return make_float2(e4m3_to_float(uint8_t(v & 0xffu)), e4m3_to_float(uint8_t(v >> 8)));
#endif
}

/// x / d for the e4m3 writers, with the reciprocal hoisted out of the loop: q = x * y with y = RN(1/d),
/// then one FMA correction (Markstein's theorem: with y within half an ulp of 1/d and q within one ulp of
/// x/d, RN(q + (x - q d) y) = RN(x/d) when the residual x - q d is exact, i.e. barring underflow).
/// Equal to IEEE division (the reference's `/`) wherever |x/d| >= 2^-10, the only quotients that can
/// change an e4m3 byte; for subnormal x the residual rounds and the last bit may differ, but such
/// quotients encode as +-0 either way. Used only when d keeps the intermediates inside the float range
/// (`fast`); an infinite or overflowing quotient, where the correction gives NaN, falls back to q (already
/// the right infinity). tests/gpu/test_cache_convert.cu checks the e4m3 bytes against numeric.h for every
/// float x and 16 divisors.
struct ExactDivider {
  float d = 1.0f;
  float y = 1.0f;
  bool fast = false;
  // Divisors in [2^-60, 2^60]: the reciprocal and any finite |x| / d that matters stay normal, and
  // quotients that underflow are far below the smallest e4m3 step (2^-9), where any rounding gives 0.
  static constexpr float kMinFast = 8.6736174e-19f;  // 2^-60
  static constexpr float kMaxFast = 1.1529215e18f;   // 2^60
  __device__ explicit ExactDivider(float divisor) : d(divisor) {
    y = __frcp_rn(divisor);
    fast = divisor >= kMinFast && divisor <= kMaxFast;
  }
  __device__ __forceinline__ float operator()(float x) const {
    if (!fast) return __fdiv_rn(x, d);
    const float q = __fmul_rn(x, y);
    const float r = __fmaf_rn(-q, d, x);
    // r == 0: q is the exact quotient (and keeps the sign of a zero x, which the FMA would lose).
    // x = +-inf or an overflowing quotient: r is NaN and q is already the right infinity.
    const float q1 = __fmaf_rn(r, y, q);
    return (r == 0.0f || q1 != q1) ? q : q1;
  }
};

}  // namespace mlakit::cuda::cache
