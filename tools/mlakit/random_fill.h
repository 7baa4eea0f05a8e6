#pragma once
// Deterministic random contents for benchmark inputs, computed per element from (seed, index) so the
// CPU and a CUDA fill kernel produce the same values without a shared generator state (the same bytes for the uniform
// values; the normal ones go through logf and cosf, whose host and device results may differ in the last bit).
// Values are uniform in [-1, 1), as in the anchor measurements of docs/performance.md (never zeros: they can
// run faster), or, for the prefill bench's `--inputs normal`, standard normal, as torch.randn fills them.

#include <cmath>
#include <cstdint>

#include "mlakit/kv_format.h"
#include "mlakit/numeric.h"

namespace mlakit::cli {

/// SplitMix64 finaliser: a good 64-bit mix of (seed, index).
MLAKIT_HOST_DEVICE uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// Uniform in [-1, 1).
MLAKIT_HOST_DEVICE float uniform_pm1(uint64_t seed, uint64_t index) {
  const uint64_t r = mix64(seed * 0x100000001b3ull + index);
  return float(r >> 40) * (2.0f / 16777216.0f) - 1.0f;  // 24 random bits
}

/// The distribution of bf16 benchmark inputs (DeviceMemory::fill_random_bf16).
enum class Inputs { kUniform, kNormal };

/// Standard normal (Box-Muller over two of uniform_pm1's draws, mapped into (0, 1]).
MLAKIT_HOST_DEVICE float normal01(uint64_t seed, uint64_t index) {
  const float u1 = 0.5f * (1.0f - uniform_pm1(seed, 2 * index));  // (0, 1]: the log stays finite
  const float u2 = 0.5f * (1.0f + uniform_pm1(seed, 2 * index + 1));
  return sqrtf(-2.0f * logf(u1)) * cosf(6.2831853f * u2);
}

/// Element `index` of a bf16 input of distribution `inputs`.
MLAKIT_HOST_DEVICE float random_input(Inputs inputs, uint64_t seed, uint64_t index) {
  return inputs == Inputs::kNormal ? normal01(seed, index) : uniform_pm1(seed, index);
}

/// Scale used for fp8_e4m3 benchmark caches: values in [-1, 1] use most of e4m3's range.
inline constexpr float kBenchKvScale = 1.0f / 256.0f;
/// Power-of-two group scale used for fp8_ds_mla benchmark caches (amax 1 -> 1/448 -> 2^-8).
inline constexpr float kBenchDsMlaScale = 1.0f / 256.0f;

/// Byte `byte_index` of a cache row whose logical values are uniform_pm1(seed, row * d_qk + i).
MLAKIT_HOST_DEVICE uint8_t random_cache_byte(KvFormat format, int d_c, int d_r, uint64_t seed, int64_t row,
                                             int64_t byte_index) {
  const int64_t d_qk = d_c + d_r;
  const uint64_t base = uint64_t(row) * uint64_t(d_qk);
  switch (format) {
    case KvFormat::kBF16:
    case KvFormat::kFP16: {
      const float v = uniform_pm1(seed, base + uint64_t(byte_index / 2));
      const uint16_t bits = format == KvFormat::kBF16 ? float_to_bf16(v) : float_to_fp16(v);
      return uint8_t(byte_index % 2 == 0 ? bits & 0xff : bits >> 8);  // little-endian
    }
    case KvFormat::kFP8E4M3:
      return float_to_e4m3(uniform_pm1(seed, base + uint64_t(byte_index)) / kBenchKvScale);
    case KvFormat::kFP8DsMla: {
      if (byte_index < ds_mla::kScaleOffset) {
        return float_to_e4m3(uniform_pm1(seed, base + uint64_t(byte_index)) / kBenchDsMlaScale);
      }
      if (byte_index < ds_mla::kRopeOffset) {
        const uint32_t bits = float_bits(kBenchDsMlaScale);
        return uint8_t(bits >> (8 * ((byte_index - ds_mla::kScaleOffset) % 4)));
      }
      const int64_t i = (byte_index - ds_mla::kRopeOffset) / 2;
      const uint16_t bits = float_to_bf16(uniform_pm1(seed, base + uint64_t(ds_mla::kDimC + i)));
      return uint8_t((byte_index - ds_mla::kRopeOffset) % 2 == 0 ? bits & 0xff : bits >> 8);
    }
    case KvFormat::kFP8DsV4: break;  // not a row format: random_page_byte
  }
  return 0;
}

/// Byte `k` of page `page` of an fp8_ds_v4 cache (docs/spec.md section 4) whose token t holds logical values
/// uniform_pm1(seed, (page * P + t) * 512 + i): 448 e4m3 values under the group scale kBenchDsMlaScale, 64 bf16, then
/// the scale blocks (UE8M0 exponent bytes of kBenchDsMlaScale, one unused zero byte), then zero padding.
MLAKIT_HOST_DEVICE uint8_t random_ds_v4_byte(uint64_t seed, int64_t page_size, int64_t page, int64_t k) {
  const int64_t blocks = page_size * ds_v4::kTokenBytes;
  if (k < blocks) {
    const int64_t j = k % ds_v4::kTokenBytes;
    const uint64_t base = uint64_t(page * page_size + k / ds_v4::kTokenBytes) * uint64_t(ds_v4::kDimC + ds_v4::kDimR);
    if (j < ds_v4::kRopeOffset) return float_to_e4m3(uniform_pm1(seed, base + uint64_t(j)) / kBenchDsMlaScale);
    const uint16_t bits = float_to_bf16(uniform_pm1(seed, base + uint64_t(ds_v4::kDimC + (j - ds_v4::kRopeOffset) / 2)));
    return uint8_t((j - ds_v4::kRopeOffset) % 2 == 0 ? bits & 0xff : bits >> 8);
  }
  if (k < blocks + page_size * ds_v4::kScaleBytes) {
    const bool unused = (k - blocks) % ds_v4::kScaleBytes == ds_v4::kNumGroups;
    return unused ? 0 : uint8_t(float_bits(kBenchDsMlaScale) >> 23);  // the exponent byte of a power of two
  }
  return 0;
}

/// Bytes of one page of a packed benchmark cache (fp8_ds_v4 pages padded as FlashMLA pads them).
MLAKIT_HOST_DEVICE int64_t bench_page_bytes(KvFormat format, int d_c, int d_r, int64_t page_size) {
  return format == KvFormat::kFP8DsV4 ? ds_v4::packed_page_bytes(page_size) : page_size * kv_row_bytes(format, d_c, d_r);
}

/// Byte `k` of page `page` of a packed benchmark cache: random_cache_byte's rows, or fp8_ds_v4's page layout.
MLAKIT_HOST_DEVICE uint8_t random_page_byte(KvFormat format, int d_c, int d_r, uint64_t seed, int64_t page_size,
                                            int64_t page, int64_t k) {
  if (format == KvFormat::kFP8DsV4) return random_ds_v4_byte(seed, page_size, page, k);
  const int64_t row_bytes = kv_row_bytes(format, d_c, d_r);
  return random_cache_byte(format, d_c, d_r, seed, page * page_size + k / row_bytes, k % row_bytes);
}

}  // namespace mlakit::cli
