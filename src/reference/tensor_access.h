#pragma once
// Element access by runtime dtype for the reference backend: every value is read as float32 and written
// back with round-to-nearest-even through numeric.h.

#include <cstdint>

#include "mlakit/numeric.h"
#include "mlakit/types.h"

namespace mlakit::reference {

/// Element offset of index (i0, i1, i2, i3) in `t` (unused trailing indices are 0), in 64 bits.
inline int64_t offset_of(const TensorView& t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
  return i0 * t.stride[0] + i1 * t.stride[1] + i2 * t.stride[2] + i3 * t.stride[3];
}

/// Reads element `off` of a floating-point tensor as float32.
inline float load_float(const TensorView& t, int64_t off) {
  switch (t.dtype) {
    case DType::kBF16: return bf16_to_float(static_cast<const uint16_t*>(t.data)[off]);
    case DType::kFP16: return fp16_to_float(static_cast<const uint16_t*>(t.data)[off]);
    case DType::kFP32: return static_cast<const float*>(t.data)[off];
    case DType::kFP8E4M3: return e4m3_to_float(static_cast<const uint8_t*>(t.data)[off]);
    default: return 0.0f;  // integer tensors are never read through this path (validate() ensures it)
  }
}

/// Writes `v` to element `off` of a floating-point tensor, rounding to its dtype.
inline void store_float(const TensorView& t, int64_t off, float v) {
  switch (t.dtype) {
    case DType::kBF16: static_cast<uint16_t*>(t.data)[off] = float_to_bf16(v); break;
    case DType::kFP16: static_cast<uint16_t*>(t.data)[off] = float_to_fp16(v); break;
    case DType::kFP32: static_cast<float*>(t.data)[off] = v; break;
    case DType::kFP8E4M3: static_cast<uint8_t*>(t.data)[off] = float_to_e4m3(v); break;
    default: break;
  }
}

/// Reads an int32 or int64 element as int64.
inline int64_t load_int(const TensorView& t, int64_t off) {
  if (t.dtype == DType::kInt64) return static_cast<const int64_t*>(t.data)[off];
  return static_cast<const int32_t*>(t.data)[off];
}

}  // namespace mlakit::reference
