#pragma once
// Dequantisation of fp8 cache values into q's 16-bit type, shared by every decode kernel family (sm80/ converts
// in shared memory, sm90/ in its producer's registers), so that both round the same way (docs/spec.md section 4):
//   fp8_e4m3:   e4m3 -> q's type exactly (every e4m3 value is a bf16 and an fp16 value); the per-cache scale is
//               not applied here but folded into tau and the output by the kernels;
//   fp8_ds_mla: e4m3 x its group's fp32 scale, multiplied in fp32, then rounded to q's type; the bf16 RoPE part
//               converted to q's type.
// Both use the hardware conversions (F2FP: e4m3x2 -> f16x2, two fp32 -> bf16x2). Integer bit moves plus a packed
// multiply were measured slower on the H100 (the Hopper path's fp8_e4m3 anchor (128, 1, 32768, 16) went from 1.77 to
// 2.54 ms, 2026-11-23): the Hopper producer is issue-bound, and they take more instructions per value.
// tests/gpu/test_dequant.cu checks every e4m3 code against numeric.h. Device code only.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"

namespace mlakit::cuda::decode {

/// 2 e4m3 values (low byte = element 0) -> bf16x2 bits, exactly, through fp16 and fp32 (e4m3x8_via_fp32's step).
__device__ __forceinline__ uint32_t e4m3x2_to_bf16x2(uint16_t v) {
  const uint32_t h = e4m3x2_to_half2(v);
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&h));
  return pack_float2<true>(f.x, f.y);
}

/// 8 e4m3 values (byte k = element k) through fp32: pack(float2 of a pair) gives each output pair's bits.
template <class Pack>
__device__ __forceinline__ uint4 e4m3x8_via_fp32(uint2 in, Pack pack) {
  const uint32_t w[2] = {in.x, in.y};
  uint4 o;
  uint32_t* ov = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t h = e4m3x2_to_half2(uint16_t(w[k / 2] >> (16 * (k % 2))));
    ov[k] = pack(__half22float2(*reinterpret_cast<const __half2*>(&h)));
  }
  return o;
}

/// 8 e4m3 values times `scale`, multiplied in fp32 and then rounded to q's type (fp8_ds_mla's latent part).
template <bool kBf16>
__device__ __forceinline__ uint4 e4m3x8_scaled_to(uint2 in, float scale) {
  return e4m3x8_via_fp32(in, [scale](float2 f) { return pack_float2<kBf16>(f.x * scale, f.y * scale); });
}

/// 8 e4m3 values -> 8 values of q's type, exactly (NaN codes give NaN): fp16 straight from the conversion, bf16
/// through fp32.
template <bool kBf16>
__device__ __forceinline__ uint4 e4m3x8_to(uint2 in) {
  if constexpr (kBf16) {
    return e4m3x8_via_fp32(in, [](float2 f) { return pack_float2<true>(f.x, f.y); });
  } else {
    return make_uint4(e4m3x2_to_half2(uint16_t(in.x)), e4m3x2_to_half2(uint16_t(in.x >> 16)),
                      e4m3x2_to_half2(uint16_t(in.y)), e4m3x2_to_half2(uint16_t(in.y >> 16)));
  }
}

/// 8 e4m3 values times a power of two (fp8_ds_v4's UE8M0 group scale, as a bf16x2 pair), into bf16: the exact
/// conversion, then one bf16x2 multiply per pair, 5 instructions per pair of values against e4m3x8_scaled_to's 6 (the
/// Hopper producer is instruction-bound on fp8 rows). Both factors are exact in bf16 and the scale is a power of two,
/// so the bf16 product rounds as the fp32 product rounded to bf16 does (tests/gpu/test_dequant.cu checks every code
/// against e4m3x8_scaled_to<true> for every one of the 256 exponents).
__device__ __forceinline__ uint4 e4m3x8_pow2_scaled_to_bf16(uint2 in, __nv_bfloat162 scale) {
  uint4 v = e4m3x8_to<true>(in);
  uint32_t* w = reinterpret_cast<uint32_t*>(&v);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const __nv_bfloat162 p = __hmul2(*reinterpret_cast<const __nv_bfloat162*>(&w[k]), scale);
    w[k] = *reinterpret_cast<const uint32_t*>(&p);
  }
  return v;
}

/// 8 bf16 values -> q's type (fp8_ds_mla's RoPE part): unchanged for bf16, rounded to fp16 otherwise.
template <bool kBf16>
__device__ __forceinline__ uint4 bf16x8_to(uint4 in) {
  if constexpr (kBf16) {
    return in;
  } else {
    const uint32_t iv[4] = {in.x, in.y, in.z, in.w};
    uint4 o;
    uint32_t* ov = reinterpret_cast<uint32_t*>(&o);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&iv[k]));
      ov[k] = pack_float2<false>(f.x, f.y);
    }
    return o;
  }
}

}  // namespace mlakit::cuda::decode
