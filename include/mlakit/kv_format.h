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
  kFP8DsV4,   ///< DeepSeek V4's paged layout, 584 bytes per token: see ds_v4 below (needs d_c = 448, d_r = 64)
};

/// "bf16", "fp16", "fp8_e4m3", "fp8_ds_mla", "fp8_ds_v4".
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

/// Byte layout of a page of the `fp8_ds_v4` format (DeepSeek V4, docs/spec.md section 4). Laid out per page, not
/// per row: a page of P tokens holds P token blocks of 576 bytes (448 e4m3 kv_c[i] / s_g, then 64 bf16 k_pe), then
/// P scale blocks of 8 bytes (seven UE8M0 exponents e_g, s_g = 2^(e_g - 127), group g = i / 64, and one unused
/// byte). So a cache view of this format has rows of kRowBytes (its size per token) that are not contiguous: token
/// t of a page is at t * kTokenBytes, its scales at P * kTokenBytes + t * kScaleBytes.
namespace ds_v4 {
inline constexpr int kDimC = 448;
inline constexpr int kDimR = 64;
inline constexpr int kGroupSize = 64;
inline constexpr int kNumGroups = kDimC / kGroupSize;             // 7
inline constexpr int kRopeOffset = kDimC;                         // in the token block
inline constexpr int kTokenBytes = kDimC + kDimR * 2;              // 576
inline constexpr int kScaleBytes = 8;                             // 7 exponents + 1 unused byte
inline constexpr int kRowBytes = kTokenBytes + kScaleBytes;        // 584 bytes per token
inline constexpr int kScaleBias = 127;                            // s_g = 2^(e_g - 127)
/// FlashMLA pads every page to a multiple of 576 bytes: the page stride of a packed cache.
constexpr int64_t packed_page_bytes(int64_t page_size) {
  return (page_size * kRowBytes + kTokenBytes - 1) / kTokenBytes * kTokenBytes;
}
static_assert(kNumGroups * kGroupSize == kDimC && kTokenBytes == 576 && kRowBytes == 584);
}  // namespace ds_v4

/// Whether `format` can store rows of the given geometry (fp8_ds_mla is fixed at 512/64, fp8_ds_v4 at 448/64).
constexpr bool kv_format_supports_dims(KvFormat f, int d_c, int d_r) {
  if (f == KvFormat::kFP8DsMla) return d_c == ds_mla::kDimC && d_r == ds_mla::kDimR;
  if (f == KvFormat::kFP8DsV4) return d_c == ds_v4::kDimC && d_r == ds_v4::kDimR;
  return true;
}

/// Bytes of one cache row (`d_c + d_r` values). Only meaningful when kv_format_supports_dims().
constexpr int64_t kv_row_bytes(KvFormat f, int d_c, int d_r) {
  switch (f) {
    case KvFormat::kBF16:
    case KvFormat::kFP16: return 2 * (int64_t(d_c) + d_r);  // summed in 64 bits: any int widths
    case KvFormat::kFP8E4M3: return int64_t(d_c) + d_r;
    case KvFormat::kFP8DsMla: return ds_mla::kRowBytes;
    case KvFormat::kFP8DsV4: return ds_v4::kRowBytes;  // per token; not a contiguous row (see ds_v4)
  }
  return 0;
}

/// Bytes of one value in the element formats (bf16, fp16, fp8_e4m3), whose rows are d_c + d_r values in a row; 0 for
/// the packed formats (fp8_ds_mla, fp8_ds_v4), whose rows hold scales beside the values. Only element formats can be
/// held split (docs/spec.md section 4: kv_c and k_pe in two tensors).
constexpr int64_t kv_element_bytes(KvFormat f) {
  switch (f) {
    case KvFormat::kBF16:
    case KvFormat::kFP16: return 2;
    case KvFormat::kFP8E4M3: return 1;
    case KvFormat::kFP8DsMla:
    case KvFormat::kFP8DsV4: return 0;
  }
  return 0;
}

static_assert(kv_row_bytes(KvFormat::kBF16, 512, 64) == 1152);
static_assert(kv_row_bytes(KvFormat::kFP8E4M3, 512, 64) == 576);
static_assert(kv_row_bytes(KvFormat::kFP8DsMla, 512, 64) == 656);
static_assert(kv_row_bytes(KvFormat::kFP8DsV4, 448, 64) == 584);

}  // namespace mlakit
