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

}  // namespace

float kv_scale_of(const KvCacheView& cache) { return cache.kv_scale ? *cache.kv_scale : cache.kv_scale_value; }

void decode_kv_row(const KvCacheView& cache, const uint8_t* row, float* out) {
  const int64_t d_qk = cache.dims.d_qk();
  switch (cache.format) {
    case KvFormat::kBF16:
      for (int64_t i = 0; i < d_qk; ++i) out[i] = bf16_to_float(load_u16(row + 2 * i));
      return;
    case KvFormat::kFP16:
      for (int64_t i = 0; i < d_qk; ++i) out[i] = fp16_to_float(load_u16(row + 2 * i));
      return;
    case KvFormat::kFP8E4M3: {
      const float kv_scale = kv_scale_of(cache);
      for (int64_t i = 0; i < d_qk; ++i) out[i] = e4m3_to_float(row[i]) * kv_scale;
      return;
    }
    case KvFormat::kFP8DsMla: decode_ds_mla(row, out); return;
  }
}

void encode_kv_row(const KvCacheView& cache, const float* values, uint8_t* row) {
  const int64_t d_qk = cache.dims.d_qk();
  switch (cache.format) {
    case KvFormat::kBF16:
      for (int64_t i = 0; i < d_qk; ++i) store_u16(row + 2 * i, float_to_bf16(values[i]));
      return;
    case KvFormat::kFP16:
      for (int64_t i = 0; i < d_qk; ++i) store_u16(row + 2 * i, float_to_fp16(values[i]));
      return;
    case KvFormat::kFP8E4M3: {
      const float kv_scale = kv_scale_of(cache);
      for (int64_t i = 0; i < d_qk; ++i) row[i] = float_to_e4m3(values[i] / kv_scale);
      return;
    }
    case KvFormat::kFP8DsMla: encode_ds_mla(values, row); return;
  }
}

}  // namespace mlakit::reference
