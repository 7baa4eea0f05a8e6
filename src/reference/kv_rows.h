#pragma once
// Encoding and decoding of single cache rows (docs/spec.md section 4). Shared by every reference operation
// that reads or writes the cache, and by tests that build caches.

#include <cstdint>

#include "mlakit/problems.h"

namespace mlakit::reference {

/// The per-tensor fp8_e4m3 scale: *kv_scale when given (a host pointer for the CPU backend), else
/// kv_scale_value. Meaningless for other formats.
float kv_scale_of(const KvCacheView& cache);

/// Address of row `row` of page `page`.
inline const uint8_t* kv_row_ptr(const KvCacheView& cache, int64_t page, int64_t row) {
  return static_cast<const uint8_t*>(cache.pages.data) + page * cache.pages.stride[0] +
         row * cache.pages.stride[1];
}
inline uint8_t* kv_row_ptr_mut(const KvCacheView& cache, int64_t page, int64_t row) {
  return static_cast<uint8_t*>(cache.pages.data) + page * cache.pages.stride[0] + row * cache.pages.stride[1];
}

/// Dequantises one row into `out[0, d_qk)` as float32. Row formats only: an fp8_ds_v4 token is not one row of
/// bytes (its scales sit elsewhere in the page), nor is a token of a split cache; use decode_kv_token.
void decode_kv_row(const KvCacheView& cache, const uint8_t* row, float* out);

/// Quantises `values[0, d_qk)` into one row in the cache's format (the writer rules of docs/spec.md 4). Row
/// formats only, as decode_kv_row.
void encode_kv_row(const KvCacheView& cache, const float* values, uint8_t* row);

/// Dequantises token `row` of page `page` into `out[0, d_qk)`: every format, fp8_ds_v4 and split caches included.
void decode_kv_token(const KvCacheView& cache, int64_t page, int64_t row, float* out);

/// Quantises `values[0, d_qk)` into token `row` of page `page`: every format, fp8_ds_v4 and split caches included.
void encode_kv_token(const KvCacheView& cache, const float* values, int64_t page, int64_t row);

}  // namespace mlakit::reference
