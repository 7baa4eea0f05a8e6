// Row codecs of docs/spec.md section 4. Rows are addressed through byte pointers with arbitrary strides, so
// every multi-byte value is moved with memcpy (no alignment assumption).

#include "reference/kv_rows.h"

#include <cmath>
#include <cstring>

#include "mlakit/numeric.h"

namespace mlakit::reference {
namespace {

uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store_u16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }

/// fp8_ds_mla writer scale: the smallest power of two >= max(amax / 448, 1e-4), as float32.
/// frexp gives ratio = frac * 2^e with frac in [0.5, 1): the ratio is itself a power of two exactly when
/// frac == 0.5, otherwise the next power of two up is 2^e. No log2/pow, so no rounding at binade edges.
float ds_mla_group_scale(float amax) {
  float ratio = amax / ds_mla::kFp8Max;
  if (!(ratio >= ds_mla::kMinScale)) ratio = ds_mla::kMinScale;  // also maps a NaN amax to the floor
  if (std::isinf(ratio)) return ratio;
  int e = 0;
  const float frac = std::frexp(ratio, &e);
  return frac == 0.5f ? ratio : std::ldexp(1.0f, e);
}

void decode_ds_mla(const uint8_t* row, float* out) {
  float scale[ds_mla::kNumGroups];
  std::memcpy(scale, row + ds_mla::kScaleOffset, sizeof scale);
  for (int i = 0; i < ds_mla::kDimC; ++i)
    out[i] = e4m3_to_float(row[ds_mla::kQuantOffset + i]) * scale[i / ds_mla::kGroupSize];
  for (int i = 0; i < ds_mla::kDimR; ++i)
    out[ds_mla::kDimC + i] = bf16_to_float(load_u16(row + ds_mla::kRopeOffset + 2 * i));
}

void encode_ds_mla(const float* values, uint8_t* row) {
  float scale[ds_mla::kNumGroups];
  for (int g = 0; g < ds_mla::kNumGroups; ++g) {
    float amax = 0.0f;
    for (int i = g * ds_mla::kGroupSize; i < (g + 1) * ds_mla::kGroupSize; ++i)
      amax = std::fmax(amax, std::fabs(values[i]));
    scale[g] = ds_mla_group_scale(amax);
  }
  // x / s_g is exact (s_g is a power of two), so the only rounding is the e4m3 one.
  for (int i = 0; i < ds_mla::kDimC; ++i)
    row[ds_mla::kQuantOffset + i] = float_to_e4m3(values[i] / scale[i / ds_mla::kGroupSize]);
  std::memcpy(row + ds_mla::kScaleOffset, scale, sizeof scale);
  for (int i = 0; i < ds_mla::kDimR; ++i)
    store_u16(row + ds_mla::kRopeOffset + 2 * i, float_to_bf16(values[ds_mla::kDimC + i]));
}

/// fp8_ds_v4 (docs/spec.md section 4): the token block and the scale block of token `row` of a page.
struct DsV4Token {
  uint8_t* block;   // 448 e4m3 bytes, then 64 bf16 k_pe
  uint8_t* scales;  // 7 UE8M0 exponents, then one unused byte
};
DsV4Token ds_v4_token(const KvCacheView& cache, int64_t page, int64_t row) {
  uint8_t* base = static_cast<uint8_t*>(cache.pages.data) + page * cache.pages.stride[0];
  return {base + row * ds_v4::kTokenBytes,
          base + cache.page_size() * ds_v4::kTokenBytes + row * ds_v4::kScaleBytes};
}

void decode_ds_v4(const DsV4Token& t, float* out) {
  for (int i = 0; i < ds_v4::kDimC; ++i) {
    const int e = t.scales[i / ds_v4::kGroupSize];
    out[i] = e4m3_to_float(t.block[i]) * std::ldexp(1.0f, e - ds_v4::kScaleBias);
  }
  for (int i = 0; i < ds_v4::kDimR; ++i)
    out[ds_v4::kDimC + i] = bf16_to_float(load_u16(t.block + ds_v4::kRopeOffset + 2 * i));
}

/// The writer: per group of 64, the ds_mla rule's power-of-two scale, stored as its biased exponent.
void encode_ds_v4(const float* values, const DsV4Token& t) {
  for (int g = 0; g < ds_v4::kNumGroups; ++g) {
    float amax = 0.0f;
    for (int i = g * ds_v4::kGroupSize; i < (g + 1) * ds_v4::kGroupSize; ++i) amax = std::fmax(amax, std::fabs(values[i]));
    const float scale = ds_mla_group_scale(amax);  // a power of two in [2^-13, 2^120], or inf (amax inf or NaN)
    int e = 0;
    std::frexp(scale, &e);  // scale = 0.5 * 2^e
    const int biased = std::isinf(scale) ? 255 : e - 1 + ds_v4::kScaleBias;
    t.scales[g] = uint8_t(biased);
    for (int i = g * ds_v4::kGroupSize; i < (g + 1) * ds_v4::kGroupSize; ++i) t.block[i] = float_to_e4m3(values[i] / scale);
  }
  t.scales[ds_v4::kNumGroups] = 0;  // the unused byte, written as FlashMLA writes it
  for (int i = 0; i < ds_v4::kDimR; ++i)
    store_u16(t.block + ds_v4::kRopeOffset + 2 * i, float_to_bf16(values[ds_v4::kDimC + i]));
}

/// `n` values of an element format (bf16, fp16, fp8_e4m3) from `src` into `out`.
void decode_elements(const KvCacheView& cache, const uint8_t* src, int64_t n, float* out) {
  switch (cache.format) {
    case KvFormat::kBF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_float(load_u16(src + 2 * i));
      return;
    case KvFormat::kFP16:
      for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_float(load_u16(src + 2 * i));
      return;
    case KvFormat::kFP8E4M3: {
      const float kv_scale = kv_scale_of(cache);
      for (int64_t i = 0; i < n; ++i) out[i] = e4m3_to_float(src[i]) * kv_scale;
      return;
    }
    case KvFormat::kFP8DsMla:
    case KvFormat::kFP8DsV4: break;  // packed rows: not element formats
  }
}

/// `n` values into an element format (bf16, fp16, fp8_e4m3) at `dst`.
void encode_elements(const KvCacheView& cache, const float* values, int64_t n, uint8_t* dst) {
  switch (cache.format) {
    case KvFormat::kBF16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, float_to_bf16(values[i]));
      return;
    case KvFormat::kFP16:
      for (int64_t i = 0; i < n; ++i) store_u16(dst + 2 * i, float_to_fp16(values[i]));
      return;
    case KvFormat::kFP8E4M3: {
      const float kv_scale = kv_scale_of(cache);
      for (int64_t i = 0; i < n; ++i) dst[i] = float_to_e4m3(values[i] / kv_scale);
      return;
    }
    case KvFormat::kFP8DsMla:
    case KvFormat::kFP8DsV4: break;  // packed rows: not element formats
  }
}

/// A split cache (docs/spec.md section 4) holds kv_c of token `row` of page `page` in pages, its k_pe here.
uint8_t* split_k_pe_ptr(const KvCacheView& cache, int64_t page, int64_t row) {
  return static_cast<uint8_t*>(cache.k_pe.data) + page * cache.k_pe.stride[0] + row * cache.k_pe.stride[1];
}

}  // namespace

void decode_kv_token(const KvCacheView& cache, int64_t page, int64_t row, float* out) {
  if (cache.format == KvFormat::kFP8DsV4) return decode_ds_v4(ds_v4_token(cache, page, row), out);
  if (cache.split()) {
    decode_elements(cache, kv_row_ptr(cache, page, row), cache.dims.d_c, out);
    decode_elements(cache, split_k_pe_ptr(cache, page, row), cache.dims.d_r, out + cache.dims.d_c);
    return;
  }
  decode_kv_row(cache, kv_row_ptr(cache, page, row), out);
}

void encode_kv_token(const KvCacheView& cache, const float* values, int64_t page, int64_t row) {
  if (cache.format == KvFormat::kFP8DsV4) return encode_ds_v4(values, ds_v4_token(cache, page, row));
  if (cache.split()) {
    encode_elements(cache, values, cache.dims.d_c, kv_row_ptr_mut(cache, page, row));
    encode_elements(cache, values + cache.dims.d_c, cache.dims.d_r, split_k_pe_ptr(cache, page, row));
    return;
  }
  encode_kv_row(cache, values, kv_row_ptr_mut(cache, page, row));
}

float kv_scale_of(const KvCacheView& cache) { return cache.kv_scale ? *cache.kv_scale : cache.kv_scale_value; }

void decode_kv_row(const KvCacheView& cache, const uint8_t* row, float* out) {
  if (cache.format == KvFormat::kFP8DsMla) return decode_ds_mla(row, out);
  if (cache.format == KvFormat::kFP8DsV4) return;  // not a row format: decode_kv_token
  decode_elements(cache, row, cache.dims.d_qk(), out);
}

void encode_kv_row(const KvCacheView& cache, const float* values, uint8_t* row) {
  if (cache.format == KvFormat::kFP8DsMla) return encode_ds_mla(values, row);
  if (cache.format == KvFormat::kFP8DsV4) return;  // not a row format: encode_kv_token
  encode_elements(cache, values, cache.dims.d_qk(), row);
}

}  // namespace mlakit::reference
