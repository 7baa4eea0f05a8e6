#pragma once
// Element types of the cache kernels as tag structs (runtime DType -> template value happens once, in the
// launch files), and the 8-element vector moves every row kernel is built from: one 16-byte access per
// lane for 16-bit data, two for float32, 8 bytes for e4m3.

#include <cstdint>

#include "cuda/cache/common/convert.cuh"

namespace mlakit::cuda::cache {

/// Elements per vector chunk: 16 bytes of a 16-bit type. Row widths handled by the vector paths must be
/// multiples of this (checked by the *_supports functions).
inline constexpr int kChunk = 8;
inline constexpr int kWarpSize = 32;

struct Bf16 {
  using Storage = uint16_t;
  __device__ static float to_float(Storage v) { return float_from_bf16(v); }
  __device__ static Storage from_float(float f) { return bf16_from_float(f); }
};
struct Fp16 {
  using Storage = uint16_t;
  __device__ static float to_float(Storage v) { return float_from_fp16(v); }
  __device__ static Storage from_float(float f) { return fp16_from_float(f); }
};
struct F32 {
  using Storage = float;
  __device__ static float to_float(Storage v) { return v; }
  __device__ static Storage from_float(float f) { return f; }
};

/// The value `f` takes once stored as E (identity for float32).
template <class E>
__device__ __forceinline__ float round_to(float f) {
  return E::to_float(E::from_float(f));
}

/// 8 consecutive elements as loaded, before conversion: 16 bytes for 16-bit types, 32 for float32
/// (keeping the raw bits halves the registers a lane needs for the loads it has in flight).
template <class E>
struct Raw8 {
  uint4 w[sizeof(typename E::Storage) / 2];
};

/// Loads 8 consecutive elements starting at a 16-byte aligned address (read-once data: streaming hint).
template <class E>
__device__ __forceinline__ Raw8<E> load_raw8(const typename E::Storage* p) {
  Raw8<E> r;
#pragma unroll
  for (int i = 0; i < int(sizeof(r.w) / sizeof(uint4)); ++i) r.w[i] = __ldcs(reinterpret_cast<const uint4*>(p) + i);
  return r;
}

/// The 8 values of a raw chunk as float32.
template <class E>
__device__ __forceinline__ void unpack8(const Raw8<E>& r, float (&v)[kChunk]) {
  if constexpr (sizeof(typename E::Storage) == 2) {
    const uint32_t w[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = E::to_float(uint16_t(w[i] & 0xffffu));
      v[2 * i + 1] = E::to_float(uint16_t(w[i] >> 16));
    }
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      v[4 * i] = __uint_as_float(r.w[i].x);
      v[4 * i + 1] = __uint_as_float(r.w[i].y);
      v[4 * i + 2] = __uint_as_float(r.w[i].z);
      v[4 * i + 3] = __uint_as_float(r.w[i].w);
    }
  }
}

/// Packs 8 values as 16-bit E into one 16-byte vector.
template <class E>
__device__ __forceinline__ uint4 pack8_16bit(const float (&v)[kChunk]) {
  uint32_t w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) w[i] = uint32_t(E::from_float(v[2 * i])) | (uint32_t(E::from_float(v[2 * i + 1])) << 16);
  return make_uint4(w[0], w[1], w[2], w[3]);
}

/// Packs e4m3(v[i] * mul) (mul exact, e.g. the reciprocal of a power of two) into 8 bytes.
__device__ __forceinline__ uint2 pack8_e4m3_mul(const float (&v)[kChunk], float mul) {
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t lo = e4m3x2_from_float(__fmul_rn(v[4 * i], mul), __fmul_rn(v[4 * i + 1], mul));
    const uint32_t hi = e4m3x2_from_float(__fmul_rn(v[4 * i + 2], mul), __fmul_rn(v[4 * i + 3], mul));
    w[i] = lo | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}

/// Packs e4m3(v[i] / div) into 8 bytes, with the reference's IEEE division (x * (1/div) alone would differ
/// in the last bit for some x and so change some e4m3 roundings; ExactDivider does not).
__device__ __forceinline__ uint2 pack8_e4m3_div(const float (&v)[kChunk], const ExactDivider& div) {
  uint32_t w[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t lo = e4m3x2_from_float(div(v[4 * i]), div(v[4 * i + 1]));
    const uint32_t hi = e4m3x2_from_float(div(v[4 * i + 2]), div(v[4 * i + 3]));
    w[i] = lo | (hi << 16);
  }
  return make_uint2(w[0], w[1]);
}

/// Packs 8 values as bf16 (numeric.h rounding, NaN included) into 16 bytes.
__device__ __forceinline__ uint4 pack8_bf16(const float (&v)[kChunk]) {
  return make_uint4(bf16x2_from_float2(v[0], v[1]), bf16x2_from_float2(v[2], v[3]), bf16x2_from_float2(v[4], v[5]),
                    bf16x2_from_float2(v[6], v[7]));
}

/// numeric.h's bf16 -> float -> bf16 round trip on raw bits: the identity except that a signalling NaN
/// becomes quiet (float_to_bf16 sets the quiet bit), so a gathered bf16 row equals the reference's bits.
__device__ __forceinline__ uint32_t bf16x2_requiet(uint32_t w) {
  uint32_t r = w;
  if ((w & 0x7fffu) > 0x7f80u) r |= 0x0040u;
  if ((w & 0x7fff0000u) > 0x7f800000u) r |= 0x00400000u;
  return r;
}

}  // namespace mlakit::cuda::cache
