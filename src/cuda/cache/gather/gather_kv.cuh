#pragma once
// gather_kv (docs/spec.md section 8): dequantised bf16 rows of every request, concatenated. Device code only.
//
// Each warp handles kGatherRowsPerWarp consecutive output rows r: the request is the last b with cu_out[b] <= r (binary search over b + 1
// prefix sums, all lanes load the same addresses), the row is j = r - cu_out[b] of that request. Each lane
// moves 8-element chunks: 16-byte bf16 stores, 16-byte (bf16/fp16) or 8-byte (e4m3) loads. Values equal
// reference/kv_rows.cpp decode_kv_row + float_to_bf16 bit for bit.
//
// Device-side guards (the host cannot read device-resident tables): a row outside every request
// (r < cu_out[0], j >= seq_lens[b]), a page index j / P >= max_pages, or a page id outside [0, num_pages)
// writes nothing and reads nothing. Rows of `out` that no request covers are left untouched, as in the
// reference.

#include <cstdint>

#include "cuda/cache/common/elements.cuh"
#include "cuda/common/ue8m0.cuh"
#include "mlakit/kv_format.h"

namespace mlakit::cuda::cache {

inline constexpr int kGatherWarpsPerBlock = 8;
inline constexpr int kGatherThreads = kGatherWarpsPerBlock * kWarpSize;
// Chunks a lane loads before its first store: 3 x 32 x 8 = 768 >= d_qk = 576, one pass per row.
inline constexpr int kGatherChunksPerLane = 3;
inline constexpr int kGatherRowsPerWarp = 2;
inline constexpr int kGatherRowsPerBlock = kGatherWarpsPerBlock * kGatherRowsPerWarp;

struct GatherKvParams {
  const uint8_t* cache;       // [num_pages, P, row_bytes]
  int64_t page_stride;        // bytes
  int64_t row_stride;         // bytes; fp8_ds_v4: its 576-byte token blocks (the scale blocks follow them)
  int64_t num_pages;
  int log2_page_size;
  const int32_t* block_table;  // [b, max_pages]
  int64_t bt_stride_b, bt_stride_page;
  int64_t max_pages;
  const int32_t* seq_lens;    // [b]
  int64_t seq_lens_stride;
  const int32_t* cu_out;      // [b + 1]
  int64_t cu_out_stride;
  int64_t batch;
  uint16_t* out;              // bf16 [total_rows, d_qk], rows 16-byte aligned
  int64_t out_stride;         // elements
  int64_t total_rows;
  int d_qk;                   // multiple of kChunk
  const float* kv_scale;      // fp8_e4m3: device scalar or null
  float kv_scale_value;
};

/// Source row of output row r, or null when r belongs to no request (or the tables point outside). fp8_ds_v4: the
/// token block, and in *scales its 8-byte scale block after the page's token blocks (docs/spec.md section 4).
__device__ __forceinline__ const uint8_t* gather_source(const GatherKvParams& p, int64_t r, const uint8_t** scales) {
  int64_t lo = 0, hi = p.batch;  // the answer lies in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (p.cu_out[mid * p.cu_out_stride] <= r) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  const int64_t j = r - p.cu_out[lo * p.cu_out_stride];
  if (j < 0 || j >= p.seq_lens[lo * p.seq_lens_stride]) return nullptr;
  const int64_t page_index = j >> p.log2_page_size;
  if (page_index >= p.max_pages) return nullptr;
  const int64_t page = p.block_table[lo * p.bt_stride_b + page_index * p.bt_stride_page];
  if (page < 0 || page >= p.num_pages) return nullptr;
  const int64_t slot = j & ((int64_t(1) << p.log2_page_size) - 1);
  const uint8_t* page_base = p.cache + page * p.page_stride;
  *scales = page_base + (int64_t(ds_v4::kTokenBytes) << p.log2_page_size) + slot * ds_v4::kScaleBytes;
  return page_base + slot * p.row_stride;
}

/// Raw bytes of one chunk as stored: 16 bytes for 16-bit rows and the bf16 k_pe of fp8_ds_mla and fp8_ds_v4, 8 for
/// e4m3 (with the group's scale as a float in the spare third word for the grouped formats).
template <KvFormat kFormat>
__device__ __forceinline__ uint4 load_chunk(const uint8_t* row, const uint8_t* scales, int c) {
  if constexpr (kFormat == KvFormat::kFP8DsV4) {
    constexpr int kLatentChunks = ds_v4::kDimC / kChunk;
    if (c < kLatentChunks) {
      const uint2 u = reinterpret_cast<const uint2*>(row)[c];
      const float s = ue8m0_to_float(scales[c / (ds_v4::kGroupSize / kChunk)]);
      return make_uint4(u.x, u.y, __float_as_uint(s), 0u);
    }
    return reinterpret_cast<const uint4*>(row + ds_v4::kRopeOffset)[c - kLatentChunks];
  } else if constexpr (kFormat == KvFormat::kBF16 || kFormat == KvFormat::kFP16) {
    return reinterpret_cast<const uint4*>(row)[c];
  } else if constexpr (kFormat == KvFormat::kFP8E4M3) {
    const uint2 u = reinterpret_cast<const uint2*>(row)[c];
    return make_uint4(u.x, u.y, 0u, 0u);
  } else {
    constexpr int kLatentChunks = ds_mla::kDimC / kChunk;
    if (c < kLatentChunks) {
      const uint2 u = reinterpret_cast<const uint2*>(row + ds_mla::kQuantOffset)[c];
      // The group's scale rides in the spare half of the vector.
      const float s = reinterpret_cast<const float*>(row + ds_mla::kScaleOffset)[c / (ds_mla::kGroupSize / kChunk)];
      return make_uint4(u.x, u.y, __float_as_uint(s), 0u);
    }
    return reinterpret_cast<const uint4*>(row + ds_mla::kRopeOffset)[c - kLatentChunks];
  }
}

/// 8 e4m3 bytes (w0, w1) times `scale`, as 8 bf16 values: per pair one e4m3x2 -> f16x2 conversion, two
/// multiplies and one bf16x2 rounding. Exact for every non-NaN code; a NaN code gives a NaN of another
/// payload than the reference's (GPU arithmetic returns its canonical NaN), which tests accept.
__device__ __forceinline__ uint4 e4m3x8_to_bf16x8(uint32_t w0, uint32_t w1, float scale) {
  const uint32_t w[2] = {w0, w1};
  uint32_t o[4];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float2 f = float2_from_e4m3x2_any_nan(uint16_t(w[i] >> (16 * h)));
      o[2 * i + h] = bf16x2_from_float2_any_nan(__fmul_rn(f.x, scale), __fmul_rn(f.y, scale));
    }
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

/// Two fp16 values as bf16, bit-exact with numeric.h (NaN payloads included): hardware conversions when
/// neither value is inf/NaN (exponent field all ones), numeric.h otherwise.
__device__ __forceinline__ uint32_t fp16x2_to_bf16x2(uint32_t w) {
  constexpr uint32_t kExpLo = 0x7c00u, kExpHi = 0x7c000000u;
  if ((w & kExpLo) == kExpLo || (w & kExpHi) == kExpHi) {
    return uint32_t(bf16_from_float(fp16_to_float(uint16_t(w & 0xffffu)))) |
           (uint32_t(bf16_from_float(fp16_to_float(uint16_t(w >> 16)))) << 16);
  }
  const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w));
  return bf16x2_from_float2_any_nan(f.x, f.y);
}

/// A chunk's 8 bf16 output values from its stored bytes.
template <KvFormat kFormat>
__device__ __forceinline__ uint4 dequant_chunk(uint4 u, int c, float kv_scale) {
  if constexpr (kFormat == KvFormat::kBF16) {
    return make_uint4(bf16x2_requiet(u.x), bf16x2_requiet(u.y), bf16x2_requiet(u.z), bf16x2_requiet(u.w));
  } else if constexpr (kFormat == KvFormat::kFP16) {
    return make_uint4(fp16x2_to_bf16x2(u.x), fp16x2_to_bf16x2(u.y), fp16x2_to_bf16x2(u.z), fp16x2_to_bf16x2(u.w));
  } else if constexpr (kFormat == KvFormat::kFP8E4M3) {
    return e4m3x8_to_bf16x8(u.x, u.y, kv_scale);
  } else {  // fp8_ds_mla, fp8_ds_v4: scaled e4m3 latent chunks, then bf16 k_pe
    constexpr int kLatentChunks = (kFormat == KvFormat::kFP8DsV4 ? ds_v4::kDimC : ds_mla::kDimC) / kChunk;
    if (c < kLatentChunks) return e4m3x8_to_bf16x8(u.x, u.y, __uint_as_float(u.z));
    return make_uint4(bf16x2_requiet(u.x), bf16x2_requiet(u.y), bf16x2_requiet(u.z), bf16x2_requiet(u.w));
  }
}

/// kGatherRowsPerWarp consecutive output rows per warp: their table look-ups and row loads are all in
/// flight before the first store (fp8 rows are only 576-656 bytes, so one row per warp leaves too few
/// bytes in flight to cover the memory latency).
template <KvFormat kFormat>
__global__ void __launch_bounds__(kGatherThreads) gather_kv_kernel(const GatherKvParams p) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t r0 = (int64_t(blockIdx.x) * kGatherWarpsPerBlock + threadIdx.x / kWarpSize) * kGatherRowsPerWarp;
  const uint8_t* rows[kGatherRowsPerWarp];
  const uint8_t* scales[kGatherRowsPerWarp];  // fp8_ds_v4 only
#pragma unroll
  for (int k = 0; k < kGatherRowsPerWarp; ++k) {
    rows[k] = r0 + k < p.total_rows ? gather_source(p, r0 + k, &scales[k]) : nullptr;
  }
  const float kv_scale = kFormat == KvFormat::kFP8E4M3 ? (p.kv_scale ? *p.kv_scale : p.kv_scale_value) : 1.0f;
  const int chunks = p.d_qk / kChunk;
  for (int base = 0; base < chunks; base += kGatherChunksPerLane * kWarpSize) {
    uint4 u[kGatherRowsPerWarp][kGatherChunksPerLane];
#pragma unroll
    for (int k = 0; k < kGatherRowsPerWarp; ++k)
#pragma unroll
      for (int j = 0; j < kGatherChunksPerLane; ++j) {
        const int c = base + lane + j * kWarpSize;
        if (rows[k] != nullptr && c < chunks) u[k][j] = load_chunk<kFormat>(rows[k], scales[k], c);
      }
#pragma unroll
    for (int k = 0; k < kGatherRowsPerWarp; ++k) {
      if (rows[k] == nullptr) continue;
      uint4* dst = reinterpret_cast<uint4*>(p.out + (r0 + k) * p.out_stride);
#pragma unroll
      for (int j = 0; j < kGatherChunksPerLane; ++j) {
        const int c = base + lane + j * kWarpSize;
        if (c < chunks) __stcs(dst + c, dequant_chunk<kFormat>(u[k][j], c, kv_scale));
      }
    }
  }
}

}  // namespace mlakit::cuda::cache
