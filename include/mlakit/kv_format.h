#pragma once
/// @file kv_format.h
/// Byte layout of every KV-cache row format (docs/spec.md section 4), as constexpr so that host code,
/// kernels and tests share one definition.

#include <cstdint>

#include "mlakit/types.h"

namespace mlakit {

/// Row formats of the paged latent cache. Every row stores `[kv_c (d_c) | k_pe (d_r)]`.
enum class KvFormat : uint8_t {
  kBF16,      ///< 2 * d_qk bytes, plain bf16
  kFP16,      ///< 2 * d_qk bytes, plain fp16
  kFP8E4M3,   ///< d_qk bytes, value = e4m3 * kv_scale (one float32 scale per cache)
  kFP8DsMla,  ///< 656 bytes, DeepSeek's layout: see ds_mla below (needs d_c = 512, d_r = 64)
};

/// "bf16", "fp16", "fp8_e4m3", "fp8_ds_mla".
const char* kv_format_name(KvFormat f);

/// Default DeepSeek-V2/V3 geometry (docs/spec.md section 0).
inline constexpr int kDefaultDimC = 512;   // d_c, kv_lora_rank
inline constexpr int kDefaultDimR = 64;    // d_r, qk_rope_head_dim
inline constexpr int kDefaultDimNope = 128;  // d_nope, qk_nope_head_dim (MHA mode)
inline constexpr int kDefaultDimVH = 128;    // d_vh, v_head_dim (MHA mode)

/// Byte layout of one `fp8_ds_mla` row.
namespace ds_mla {
inline constexpr int kDimC = 512;          // quantised latent width
inline constexpr int kDimR = 64;           // bf16 rope width
inline constexpr int kGroupSize = 128;     // latent elements per scale
inline constexpr int kNumGroups = kDimC / kGroupSize;
inline constexpr int kQuantOffset = 0;     // e4m3 kv_c[i] / s_g
inline constexpr int kScaleOffset = kQuantOffset + kDimC;              // four float32 scales
inline constexpr int kRopeOffset = kScaleOffset + kNumGroups * 4;      // 64 bf16 k_pe
inline constexpr int kRowBytes = kRopeOffset + kDimR * 2;
/// Writer's floor on a group scale, so an all-zero group still gets a finite power of two.
inline constexpr float kMinScale = 1e-4f;
/// Largest finite e4m3 magnitude: a group's amax maps to at most this.
inline constexpr float kFp8Max = 448.0f;
static_assert(kNumGroups * kGroupSize == kDimC);
static_assert(kScaleOffset == 512 && kRopeOffset == 528 && kRowBytes == 656,
              "docs/spec.md section 4: [0,512) e4m3, [512,528) 4 x f32, [528,656) 64 x bf16");
}  // namespace ds_mla

/// Whether `format` can store rows of the given geometry (fp8_ds_mla is fixed at 512/64).
constexpr bool kv_format_supports_dims(KvFormat f, int d_c, int d_r) {
  return f != KvFormat::kFP8DsMla || (d_c == ds_mla::kDimC && d_r == ds_mla::kDimR);
}

/// Bytes of one cache row (`d_c + d_r` values). Only meaningful when kv_format_supports_dims().
constexpr int64_t kv_row_bytes(KvFormat f, int d_c, int d_r) {
  switch (f) {
    case KvFormat::kBF16:
    case KvFormat::kFP16: return 2 * (int64_t(d_c) + d_r);  // summed in 64 bits: any int widths
    case KvFormat::kFP8E4M3: return int64_t(d_c) + d_r;
    case KvFormat::kFP8DsMla: return ds_mla::kRowBytes;
  }
  return 0;
}

static_assert(kv_row_bytes(KvFormat::kBF16, 512, 64) == 1152);
static_assert(kv_row_bytes(KvFormat::kFP8E4M3, 512, 64) == 576);
static_assert(kv_row_bytes(KvFormat::kFP8DsMla, 512, 64) == 656);

}  // namespace mlakit
