#pragma once
// Small device helpers of the few-row decode kernels (few_rows.cuh): e4m3 and q conversions to their 16-bit mma
// operands, threadIdx.x read afresh, shared-memory loads and stores by address, the cache's one scale.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/decode/sm80/few_rows_layout.h"
#include "cuda/decode/smxx/dequant.cuh"
#include "cuda/decode/smxx/params.h"

namespace mlakit::cuda::decode {

/// 16 e4m3 bytes -> 8 words of 16-bit pairs (bf16x2 or fp16x2), exactly and unscaled (word i = bytes 2i, 2i + 1, low
/// byte in the low half): dequant.cuh's e4m3x8_to twice (fp16: one conversion per word; bf16: four, through fp16 and
/// fp32).
template <bool kBf16>
__device__ __forceinline__ void e4m3x16_to(const uint4 raw, uint32_t (&w)[8]) {
  const uint4 lo = e4m3x8_to<kBf16>(make_uint2(raw.x, raw.y));
  const uint4 hi = e4m3x8_to<kBf16>(make_uint2(raw.z, raw.w));
  w[0] = lo.x, w[1] = lo.y, w[2] = lo.z, w[3] = lo.w;
  w[4] = hi.x, w[5] = hi.y, w[6] = hi.z, w[7] = hi.w;
}

/// fp16 operands (F::kF16Mma): this warp's q words (bf16x2: its slice's A fragments and its RoPE step's) into fp16x2,
/// divided by a power of two 2^s (q_unscale = 2^s) when the warp's largest |q| lies outside [2^-6, 2^15): then the
/// largest becomes one in [2^14, 2^15), below fp16's 65504, and the partial S is multiplied back by 2^s. Within that
/// range s = 0 and the conversion is exact for |q| >= 2^-17 (fp16's subnormals hold bf16's 8 significant bits from
/// there); smaller elements round to fp16's 2^-24 steps, an error of at most 2^-19 of the warp's largest |q| (bf16's
/// own step is 2^-8 of an element). Infinite and NaN elements do not count in the largest |q| (so that one of them
/// cannot leave a finite |q| >= 65520 of another head to overflow) and convert as themselves.
__device__ __forceinline__ void q_to_f16(uint32_t (&qa)[4][4], uint32_t (&qr)[2], float& q_unscale) {
  auto unpack = [](uint32_t w) { return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w)); };
  auto finite_abs = [](float x) { return fabsf(x) < INFINITY ? fabsf(x) : 0.0f; };  // NaN and +-inf: 0
  float m = 0.0f;
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 f = unpack(qa[s][j]);
      m = fmaxf(m, fmaxf(finite_abs(f.x), finite_abs(f.y)));
    }
#pragma unroll
  for (int j = 0; j < 2; ++j) {
    const float2 f = unpack(qr[j]);
    m = fmaxf(m, fmaxf(finite_abs(f.x), finite_abs(f.y)));
  }
#pragma unroll
  for (int x = 16; x >= 1; x /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, x));
  int sh = 0;
  if (m >= 32768.0f || (m > 0.0f && m < 0.015625f)) {
    // m's unbiased exponent e (fp32 subnormals read as -127), then s = e - 14, kept where 2^s and 2^-s are normal.
    const int e = int((__float_as_uint(m) >> 23) & 0xffu) - 127;
    sh = min(max(e - 14, -126), 113);
  }
  const float mul = __uint_as_float(uint32_t(127 - sh) << 23);  // 2^-s, exact
  q_unscale = __uint_as_float(uint32_t(127 + sh) << 23);
  auto convert = [&](uint32_t w) {
    const float2 f = unpack(w);
    return pack_float2<false>(f.x * mul, f.y * mul);
  };
#pragma unroll
  for (int s = 0; s < 4; ++s)
#pragma unroll
    for (int j = 0; j < 4; ++j) qa[s][j] = convert(qa[s][j]);
  qr[0] = convert(qr[0]);
  qr[1] = convert(qr[1]);
}

/// threadIdx.x read afresh (volatile, so never hoisted or kept): offsets derived from it are recomputed where they are
/// used instead of being kept live through the tile loop (ptxas otherwise spilled such loop-invariant addresses
/// under the 128-register bound of 2 CTAs per SM).
__device__ __forceinline__ int fresh_tid() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
  // The asm hides threadIdx.x's range: without it every t / 32, t % 4 ... of the phases is a signed division
  // sequence (~15 instructions per tile for the (c) addresses alone).
  __builtin_assume(t >= 0 && t < few_rows::kThreads);
  return t;
}

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];\n" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint16_t lds16(uint32_t addr) {
  uint16_t v;
  asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.u32 %0, [%1];\n" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ float2 lds64f(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

/// The cache's one scale (fp8_e4m3, from device memory or the parameters), 1 for the formats with scales in their rows.
template <class F>
__device__ __forceinline__ float cache_scale(const DecodeParams& p) {
  if constexpr (F::kKind == KvKind::kE4M3) return p.kv_scale != nullptr ? *p.kv_scale : p.kv_scale_value;
  return 1.0f;
}

}  // namespace mlakit::cuda::decode
