#pragma once
// UE8M0 scale bytes (DeepSeek V4's fp8_ds_v4, docs/spec.md section 4): one reading shared by the decode kernels and
// gather_kv, so that both dequantise as the reference does (std::ldexp(1.0f, e - 127)). Device code only.

#include <cstdint>

namespace mlakit::cuda {

/// The float 2^(e - 127): the exponent field itself for e in [1, 254], +inf for 255 (2^128 overflows in the
/// reference too), and the subnormal 2^-127 for e = 0.
__device__ __forceinline__ float ue8m0_to_float(uint32_t e) { return __uint_as_float(e == 0u ? 0x00400000u : e << 23); }

/// The UE8M0 byte of a power-of-two float scale (the writer's s_g): its exponent field; +inf gives 255.
__device__ __forceinline__ uint8_t ue8m0_from_pow2(float s) { return uint8_t((__float_as_uint(s) >> 23) & 0xffu); }

}  // namespace mlakit::cuda
