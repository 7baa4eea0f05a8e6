#pragma once
// append_kv with optional fused RoPE and fp8 q (docs/spec.md sections 4 and 7): device code only.
//
// One warp per token writes its cache row: kv_c in 8-element chunks (one 16-byte load per lane and chunk,
// 2 chunks per lane at d_c = 512), k_pe one rotation pair per lane (32 pairs at d_r = 64). The same launch
// also handles q when given: one warp per token and 8 heads for RoPE on q_pe alone, or one warp per
// (token, head) row when the e4m3 copy of q is asked for too. Bytes of every encoded value equal the CPU reference's (reference/
// kv_rows.cpp, reference/append_kv.cpp, reference/rope_math.h): same formulas, same operation order, no
// contraction into FMA where it could change a rounding.
//
// Device-side index guards (the host cannot read device-resident slots or positions):
//  - slot < 0: padding, the token is skipped (docs/spec.md 7);
//  - slot >= num_pages * P: the token is skipped, nothing is written (the reference rejects the call);
//  - position outside [0, max_pos) with fused RoPE: the token's cache row is not written and its q row is
//    not rotated (the table is never read outside its rows); q_fp8 is still written from q as it stands,
//    so every q_fp8 element is defined.
//  - duplicate slots race (last writer unspecified); the reference writes tokens in order.

#include <cstdint>
#include <type_traits>

#include "cuda/cache/common/elements.cuh"
#include "cuda/common/ue8m0.cuh"
#include "mlakit/kv_format.h"

namespace mlakit::cuda::cache {

inline constexpr int kAppendWarpsPerBlock = 8;  // 256 threads: 8 tokens (or q rows) per block
inline constexpr int kAppendThreads = kAppendWarpsPerBlock * kWarpSize;
// Chunks a lane keeps in flight before storing: 2 x 32 lanes x 8 = 512 latent elements, all of d_c = 512
// in one pass (wider d_c loops). More chunks per lane only cost registers: 8 warps per block and 8 blocks
// per SM already keep ~64 KB of loads in flight per SM, above the ~14 KB that 3 TB/s x ~600 ns needs.
inline constexpr int kAppendChunksPerLane = 2;
// Heads of one token a warp rotates when only q_pe RoPE is asked for (no q_fp8): 8 heads x 2 loads per
// lane in flight, and one cos/sin read per 8 heads.
inline constexpr int kQHeadsPerWarp = 8;

struct AppendKvParams {
  const void* kv_c;            // [T, d_c] of the input dtype; rows 16-byte aligned
  int64_t kv_c_stride;         // elements between tokens
  const void* k_pe;            // [T, d_r] of the input dtype (any alignment)
  int64_t k_pe_stride;
  const int64_t* slot_mapping;  // [T]
  int64_t slot_stride;
  uint8_t* cache;              // [num_pages, P, row_bytes]; rows aligned to the store width
  int64_t page_stride;         // bytes
  int64_t row_stride;          // bytes; fp8_ds_v4: its 576-byte token blocks (the scale blocks follow them)
  int64_t capacity;            // num_pages * P: slots at or above are skipped
  int log2_page_size;
  int64_t num_tokens;          // T
  int d_c;                     // multiple of kChunk
  int d_r;                     // even
  const float* kv_scale;       // fp8_e4m3: device scalar, or null to use kv_scale_value
  float kv_scale_value;

  // Fused RoPE; positions == null means none.
  const int64_t* positions;    // [T]
  int64_t positions_stride;
  const float* cos_sin;        // [max_pos, d_r]: [cos | sin], row stride cos_sin_stride elements
  int64_t cos_sin_stride;
  int64_t max_pos;
  bool neox;                   // pairs (i, i + d_r/2) instead of (2i, 2i+1)

  // q rows; q == null means none.
  void* q;                     // [T, h_q, d_qk] bf16|fp16, rotated in place
  int64_t q_stride_t, q_stride_h;  // elements
  int h_q;
  bool q_is_bf16;
  uint8_t* q_fp8;              // optional [T, h_q, d_qk] e4m3
  int64_t q_fp8_stride_t, q_fp8_stride_h;  // bytes
  const float* q_scale;        // device scalar, or null to use q_scale_value
  float q_scale_value;

  int64_t cache_blocks;        // blocks [0, cache_blocks) write the cache, the rest handle q rows
};

/// Rotation pair i: (a, b) element indices within the d_r-wide vector.
__device__ __forceinline__ int2 rope_pair(int i, int d_r, bool neox) {
  return neox ? make_int2(i, i + d_r / 2) : make_int2(2 * i, 2 * i + 1);
}

/// reference/rope_math.h: y_a = x_a c - x_b s, y_b = x_a s + x_b c in double (each float product is exact
/// there, so FMA contraction cannot change the result), rounded once to float.
__device__ __forceinline__ float2 rope_rotate(float xa, float xb, float c, float s) {
  const double a = xa, b = xb, cd = c, sd = s;
  return make_float2(float(a * cd - b * sd), float(a * sd + b * cd));
}

/// Row address of a slot, or null when the slot writes nothing (padding, or outside the cache).
__device__ __forceinline__ uint8_t* slot_row(const AppendKvParams& p, int64_t slot) {
  if (slot < 0 || slot >= p.capacity) return nullptr;
  const int64_t page = slot >> p.log2_page_size;
  const int64_t row = slot & ((int64_t(1) << p.log2_page_size) - 1);
  return p.cache + page * p.page_stride + row * p.row_stride;
}

/// fp8_ds_v4 (docs/spec.md section 4): the 8-byte scale block of a slot's token, after the page's P token blocks.
__device__ __forceinline__ uint8_t* ds_v4_scales(const AppendKvParams& p, int64_t slot) {
  const int64_t page = slot >> p.log2_page_size;
  const int64_t row = slot & ((int64_t(1) << p.log2_page_size) - 1);
  return p.cache + page * p.page_stride + (int64_t(ds_v4::kTokenBytes) << p.log2_page_size) + row * ds_v4::kScaleBytes;
}

/// Writes encoded element pair (a, b) of k_pe: bytes [d_c + a], [d_c + b] of the row in the row format.
template <KvFormat kFormat>
__device__ __forceinline__ void store_k_pe_pair(uint8_t* row, int d_c, int2 ab, float ya, float yb,
                                                const ExactDivider& kv_scale, bool adjacent) {
  if constexpr (kFormat == KvFormat::kFP8E4M3) {
    const uint16_t w = e4m3x2_from_float(kv_scale(ya), kv_scale(yb));
    if (adjacent) {
      *reinterpret_cast<uint16_t*>(row + d_c + ab.x) = w;
    } else {
      row[d_c + ab.x] = uint8_t(w & 0xffu);
      row[d_c + ab.y] = uint8_t(w >> 8);
    }
  } else {
    using Out = std::conditional_t<kFormat == KvFormat::kFP16, Fp16, Bf16>;
    // 16-bit formats: k_pe follows kv_c; fp8_ds_mla and fp8_ds_v4 keep k_pe as bf16 at byte kRopeOffset.
    uint16_t* base = kFormat == KvFormat::kFP8DsMla  ? reinterpret_cast<uint16_t*>(row + ds_mla::kRopeOffset)
                     : kFormat == KvFormat::kFP8DsV4 ? reinterpret_cast<uint16_t*>(row + ds_v4::kRopeOffset)
                                                     : reinterpret_cast<uint16_t*>(row) + d_c;
    const uint16_t ea = Out::from_float(ya), eb = Out::from_float(yb);
    if (adjacent) {
      *reinterpret_cast<uint32_t*>(base + ab.x) = uint32_t(ea) | (uint32_t(eb) << 16);
    } else {
      base[ab.x] = ea;
      base[ab.y] = eb;
    }
  }
}

/// numeric.h fp16 -> float -> fp16 on raw bits: the identity except that a NaN becomes sign | 0x7e00.
__device__ __forceinline__ uint32_t fp16x2_canonical_nan(uint32_t w) {
  uint32_t r = w;
  if ((w & 0x7fffu) > 0x7c00u) r = (r & 0xffff0000u) | (w & 0x8000u) | 0x7e00u;
  if ((w & 0x7fff0000u) > 0x7c000000u) r = (r & 0x0000ffffu) | (w & 0x80000000u) | 0x7e000000u;
  return r;
}

/// One latent chunk (8 values as loaded) encoded into its bytes of a bf16/fp16/fp8_e4m3 row.
template <class In, KvFormat kFormat>
__device__ __forceinline__ void store_latent_chunk(const Raw8<In>& raw, uint8_t* row, int c, const ExactDivider& kv_scale) {
  if constexpr (kFormat == KvFormat::kBF16 && std::is_same_v<In, Bf16>) {
    // bf16 -> bf16: numeric.h's round trip only quiets signalling NaNs; no float conversion needed.
    const uint4 u = raw.w[0];
    reinterpret_cast<uint4*>(row)[c] = make_uint4(bf16x2_requiet(u.x), bf16x2_requiet(u.y), bf16x2_requiet(u.z),
                                                  bf16x2_requiet(u.w));
  } else if constexpr (kFormat == KvFormat::kFP16 && std::is_same_v<In, Fp16>) {
    const uint4 u = raw.w[0];
    reinterpret_cast<uint4*>(row)[c] = make_uint4(fp16x2_canonical_nan(u.x), fp16x2_canonical_nan(u.y),
                                                  fp16x2_canonical_nan(u.z), fp16x2_canonical_nan(u.w));
  } else {
    float v[kChunk];
    unpack8<In>(raw, v);
    if constexpr (kFormat == KvFormat::kFP8E4M3) {
      reinterpret_cast<uint2*>(row)[c] = pack8_e4m3_div(v, kv_scale);
    } else if constexpr (kFormat == KvFormat::kBF16) {
      reinterpret_cast<uint4*>(row)[c] = pack8_bf16(v);
    } else {
      reinterpret_cast<uint4*>(row)[c] = pack8_16bit<Fp16>(v);
    }
  }
}

/// Loads pass `base` of a latent row: chunk base + lane + 32 k for k < kAppendChunksPerLane.
template <class In>
__device__ __forceinline__ void load_latent_pass(const typename In::Storage* src, int base, int chunks, int lane,
                                                 Raw8<In> (&raw)[kAppendChunksPerLane]) {
#pragma unroll
  for (int k = 0; k < kAppendChunksPerLane; ++k) {
    const int c = base + lane + k * kWarpSize;
    if (c < chunks) raw[k] = load_raw8<In>(src + int64_t(c) * kChunk);
  }
}

/// kv_c of one token into a bf16/fp16/fp8_e4m3 row. The first pass arrives preloaded (issued before the
/// slot was known); wider rows load and store further passes here.
template <class In, KvFormat kFormat>
__device__ __forceinline__ void write_latent_plain(const AppendKvParams& p, const typename In::Storage* src,
                                                   uint8_t* row, int lane, const ExactDivider& kv_scale,
                                                   Raw8<In> (&raw)[kAppendChunksPerLane]) {
  const int chunks = p.d_c / kChunk;
  for (int base = 0; base < chunks; base += kAppendChunksPerLane * kWarpSize) {
    if (base > 0) load_latent_pass<In>(src, base, chunks, lane, raw);
#pragma unroll
    for (int k = 0; k < kAppendChunksPerLane; ++k) {
      const int c = base + lane + k * kWarpSize;
      if (c < chunks) store_latent_chunk<In, kFormat>(raw[k], row, c, kv_scale);
    }
  }
}

/// fp8_ds_mla group scale (reference/kv_rows.cpp ds_mla_group_scale): the smallest power of two
/// >= max(amax / 448, 1e-4), found on the float bits (a ratio with a non-zero mantissa rounds up to the
/// next binade), so no log2 rounding can pick the wrong power.
__device__ __forceinline__ float ds_mla_group_scale(float amax) {
  float ratio = __fdiv_rn(amax, ds_mla::kFp8Max);
  if (!(ratio >= ds_mla::kMinScale)) ratio = ds_mla::kMinScale;
  if (isinf(ratio)) return ratio;
  constexpr uint32_t kMantissa = 0x007fffffu, kExponent = 0x7f800000u, kOneBinade = 0x00800000u;
  const uint32_t bits = float_bits(ratio);
  return (bits & kMantissa) == 0u ? ratio : bits_float((bits & kExponent) + kOneBinade);
}

/// kv_c of one token into an fp8_ds_mla row. d_c = 512 is 64 chunks, 2 per lane (both preloaded); a
/// scale group of 128 elements is 16 chunks, so lanes 16g'..16g'+15 of pass k hold group 2k + g': its
/// amax is a 16-lane butterfly reduction.
template <class In>
__device__ __forceinline__ void write_latent_ds_mla(uint8_t* row, int lane, const Raw8<In> (&raw)[kAppendChunksPerLane]) {
  constexpr int kChunksPerGroup = ds_mla::kGroupSize / kChunk;  // 16
  constexpr int kPasses = ds_mla::kDimC / (kChunk * kWarpSize);  // 2
  static_assert(kPasses == kAppendChunksPerLane && kChunksPerGroup == 16);
#pragma unroll
  for (int k = 0; k < kPasses; ++k) {
    float v[kChunk];
    unpack8<In>(raw[k], v);
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < kChunk; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int offset = kChunksPerGroup / 2; offset >= 1; offset /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    const float scale = ds_mla_group_scale(amax);
    // x / s_g == x * (1 / s_g) exactly: s_g is a power of two in [1e-4, 2^120], so 1/s_g is exact.
    const int c = lane + k * kWarpSize;
    reinterpret_cast<uint2*>(row + ds_mla::kQuantOffset)[c] = pack8_e4m3_mul(v, 1.0f / scale);
    if (lane % kChunksPerGroup == 0) {
      reinterpret_cast<float*>(row + ds_mla::kScaleOffset)[c / kChunksPerGroup] = scale;
    }
  }
}

/// kv_c of one token into an fp8_ds_v4 token block and its scale block. d_c = 448 is 56 chunks: lane l holds chunk
/// l (pass 0) and l + 32 (pass 1, lanes 0-23); a scale group of 64 elements is 8 chunks, so the 8 lanes of an aligned
/// octet hold one group in each pass (lanes 24-31 hold none in pass 1: their amax stays 0 among themselves).
template <class In>
__device__ __forceinline__ void write_latent_ds_v4(uint8_t* row, uint8_t* scales, int lane,
                                                   const Raw8<In> (&raw)[kAppendChunksPerLane]) {
  constexpr int kLatentChunks = ds_v4::kDimC / kChunk;         // 56
  constexpr int kChunksPerGroup = ds_v4::kGroupSize / kChunk;  // 8
  static_assert(kLatentChunks <= kAppendChunksPerLane * kWarpSize && kWarpSize % kChunksPerGroup == 0);
#pragma unroll
  for (int k = 0; k < kAppendChunksPerLane; ++k) {
    const int c = lane + k * kWarpSize;
    const bool mine = c < kLatentChunks;
    float v[kChunk];
    float amax = 0.0f;
    if (mine) {
      unpack8<In>(raw[k], v);
#pragma unroll
      for (int i = 0; i < kChunk; ++i) amax = fmaxf(amax, fabsf(v[i]));
    }
#pragma unroll
    for (int offset = kChunksPerGroup / 2; offset >= 1; offset /= 2)
      amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, offset));
    if (!mine) continue;
    const float scale = ds_mla_group_scale(amax);  // the same rule as fp8_ds_mla, stored as its exponent byte
    reinterpret_cast<uint2*>(row)[c] = pack8_e4m3_mul(v, 1.0f / scale);
    if (lane % kChunksPerGroup == 0) scales[c / kChunksPerGroup] = ue8m0_from_pow2(scale);
  }
  if (lane == 0) scales[ds_v4::kNumGroups] = 0;  // the unused byte, as the reference (and FlashMLA) write it
}

/// One token's cache row (warp `t`). Every load that does not depend on another is issued first (slot,
/// position, the first latent pass, this lane's first k_pe pair), so a token costs one memory round trip
/// plus the cos/sin read, not three chained ones.
template <class In, KvFormat kFormat>
__device__ __forceinline__ void append_token(const AppendKvParams& p, int64_t t, int lane) {
  const int64_t slot = p.slot_mapping[t * p.slot_stride];
  const int64_t pos = p.positions != nullptr ? p.positions[t * p.positions_stride] : 0;
  const auto* src = static_cast<const typename In::Storage*>(p.kv_c) + t * p.kv_c_stride;
  const int chunks = p.d_c / kChunk;
  Raw8<In> raw[kAppendChunksPerLane];
  load_latent_pass<In>(src, 0, chunks, lane, raw);
  const auto* pe = static_cast<const typename In::Storage*>(p.k_pe) + t * p.k_pe_stride;
  const int half = p.d_r / 2;
  const bool rope = p.positions != nullptr;
  const bool neox = rope && p.neox;
  typename In::Storage first_a{}, first_b{};
  const int2 first_ab = rope_pair(lane, p.d_r, neox);
  if (lane < half) {
    first_a = pe[first_ab.x];
    first_b = pe[first_ab.y];
  }

  uint8_t* row = slot_row(p, slot);
  if (row == nullptr) return;
  const float* cs = nullptr;
  float first_c = 1.0f, first_s = 0.0f;
  if (rope) {
    if (pos < 0 || pos >= p.max_pos) return;  // never read outside the table; the token is skipped
    cs = p.cos_sin + pos * p.cos_sin_stride;
    if (lane < half) {
      first_c = cs[lane];
      first_s = cs[half + lane];
    }
  }
  const ExactDivider kv_scale(kFormat == KvFormat::kFP8E4M3 ? (p.kv_scale ? *p.kv_scale : p.kv_scale_value) : 1.0f);

  if constexpr (kFormat == KvFormat::kFP8DsMla) {
    write_latent_ds_mla<In>(row, lane, raw);
  } else if constexpr (kFormat == KvFormat::kFP8DsV4) {
    write_latent_ds_v4<In>(row, ds_v4_scales(p, slot), lane, raw);
  } else {
    write_latent_plain<In, kFormat>(p, src, row, lane, kv_scale, raw);
  }

  for (int i = lane; i < half; i += kWarpSize) {
    const bool first = i == lane;
    const int2 ab = first ? first_ab : rope_pair(i, p.d_r, neox);
    float ya = In::to_float(first ? first_a : pe[ab.x]), yb = In::to_float(first ? first_b : pe[ab.y]);
    if (rope) {
      const float2 y = rope_rotate(ya, yb, first ? first_c : cs[i], first ? first_s : cs[half + i]);
      // reference/append_kv.cpp: the rotated k_pe is rounded to k_pe's dtype before it is encoded.
      ya = round_to<In>(y.x);
      yb = round_to<In>(y.y);
    }
    store_k_pe_pair<kFormat>(row, p.d_c, ab, ya, yb, kv_scale, !neox);
  }
}

/// One (token, head) row of q: RoPE on its last d_r columns in place, then the optional e4m3 copy of the
/// whole row from q as stored (reference/append_kv.cpp quantise_q).
template <class Q>
__device__ __forceinline__ void process_q_row(const AppendKvParams& p, int64_t r, int lane) {
  const int64_t t = r / p.h_q;
  const int64_t h = r - t * p.h_q;
  auto* q = static_cast<typename Q::Storage*>(p.q) + t * p.q_stride_t + h * p.q_stride_h;
  const float* cs = nullptr;
  if (p.positions != nullptr) {
    const int64_t pos = p.positions[t * p.positions_stride];
    if (pos >= 0 && pos < p.max_pos) cs = p.cos_sin + pos * p.cos_sin_stride;
  }
  uint8_t* q8 = p.q_fp8 ? p.q_fp8 + t * p.q_fp8_stride_t + h * p.q_fp8_stride_h : nullptr;
  const ExactDivider q_scale(q8 ? (p.q_scale ? *p.q_scale : p.q_scale_value) : 1.0f);

  if (q8 != nullptr) {  // the latent columns [0, d_c): no RoPE, straight to e4m3
    const int chunks = p.d_c / kChunk;
    for (int base = 0; base < chunks; base += kAppendChunksPerLane * kWarpSize) {
      Raw8<Q> raw[kAppendChunksPerLane];
#pragma unroll
      for (int k = 0; k < kAppendChunksPerLane; ++k) {
        const int c = base + lane + k * kWarpSize;
        if (c < chunks) raw[k] = load_raw8<Q>(q + int64_t(c) * kChunk);
      }
#pragma unroll
      for (int k = 0; k < kAppendChunksPerLane; ++k) {
        const int c = base + lane + k * kWarpSize;
        if (c >= chunks) continue;
        float v[kChunk];
        unpack8<Q>(raw[k], v);
        reinterpret_cast<uint2*>(q8)[c] = pack8_e4m3_div(v, q_scale);
      }
    }
  }

  const int half = p.d_r / 2;
  for (int i = lane; i < half; i += kWarpSize) {
    const int2 ab = rope_pair(i, p.d_r, p.neox);
    typename Q::Storage* pe = q + p.d_c;
    typename Q::Storage ea = pe[ab.x], eb = pe[ab.y];
    if (cs != nullptr) {
      const float2 y = rope_rotate(Q::to_float(ea), Q::to_float(eb), cs[i], cs[half + i]);
      ea = Q::from_float(y.x);
      eb = Q::from_float(y.y);
      pe[ab.x] = ea;
      pe[ab.y] = eb;
    }
    if (q8 != nullptr) {
      const uint16_t w = e4m3x2_from_float(q_scale(Q::to_float(ea)), q_scale(Q::to_float(eb)));
      q8[p.d_c + ab.x] = uint8_t(w & 0xffu);
      q8[p.d_c + ab.y] = uint8_t(w >> 8);
    }
  }
}

/// RoPE on q_pe only (no q_fp8): one warp per token and kQHeadsPerWarp heads. Lane i owns rotation pair i
/// of every head, so the token's cos/sin are read once for all its heads, and the 2 x kQHeadsPerWarp
/// loads of a lane are issued before the position is known (one round trip, then the table read).
template <class Q>
__device__ __forceinline__ void rotate_q_heads(const AppendKvParams& p, int64_t unit, int lane) {
  const int64_t groups = (p.h_q + kQHeadsPerWarp - 1) / kQHeadsPerWarp;
  const int64_t t = unit / groups;
  const int h0 = int(unit - t * groups) * kQHeadsPerWarp;
  const int64_t pos = p.positions[t * p.positions_stride];
  auto* q = static_cast<typename Q::Storage*>(p.q) + t * p.q_stride_t + int64_t(h0) * p.q_stride_h + p.d_c;
  const int half = p.d_r / 2;
  for (int i = lane; i < half; i += kWarpSize) {
    const int2 ab = rope_pair(i, p.d_r, p.neox);
    typename Q::Storage a[kQHeadsPerWarp], b[kQHeadsPerWarp];
#pragma unroll
    for (int k = 0; k < kQHeadsPerWarp; ++k) {
      if (h0 + k < p.h_q) {
        a[k] = q[k * p.q_stride_h + ab.x];
        b[k] = q[k * p.q_stride_h + ab.y];
      }
    }
    if (pos < 0 || pos >= p.max_pos) return;  // never read outside the table; q stays as it is
    const float* cs = p.cos_sin + pos * p.cos_sin_stride;
    const float c = cs[i], sn = cs[half + i];
#pragma unroll
    for (int k = 0; k < kQHeadsPerWarp; ++k) {
      if (h0 + k >= p.h_q) continue;
      const float2 y = rope_rotate(Q::to_float(a[k]), Q::to_float(b[k]), c, sn);
      q[k * p.q_stride_h + ab.x] = Q::from_float(y.x);
      q[k * p.q_stride_h + ab.y] = Q::from_float(y.y);
    }
  }
}

template <class In, KvFormat kFormat>
__global__ void __launch_bounds__(kAppendThreads) append_kv_kernel(const AppendKvParams p) {
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  if (blockIdx.x < p.cache_blocks) {
    const int64_t t = int64_t(blockIdx.x) * kAppendWarpsPerBlock + warp;
    if (t < p.num_tokens) append_token<In, kFormat>(p, t, lane);
    return;
  }
  const int64_t r = (int64_t(blockIdx.x) - p.cache_blocks) * kAppendWarpsPerBlock + warp;
  if (p.q_fp8 == nullptr) {  // RoPE only: warps over (token, head group)
    if (r >= p.num_tokens * ((p.h_q + kQHeadsPerWarp - 1) / kQHeadsPerWarp)) return;
    if (p.q_is_bf16) {
      rotate_q_heads<Bf16>(p, r, lane);
    } else {
      rotate_q_heads<Fp16>(p, r, lane);
    }
    return;
  }
  if (r >= p.num_tokens * p.h_q) return;  // RoPE and/or the fp8 copy: warps over (token, head) rows
  if (p.q_is_bf16) {
    process_q_row<Bf16>(p, r, lane);
  } else {
    process_q_row<Fp16>(p, r, lane);
  }
}

/// Warps the q part of a launch needs (see append_kv_kernel).
inline int64_t q_warps(const AppendKvParams& p) {
  if (p.q == nullptr) return 0;
  return p.q_fp8 == nullptr ? p.num_tokens * ((p.h_q + kQHeadsPerWarp - 1) / kQHeadsPerWarp) : p.num_tokens * p.h_q;
}

}  // namespace mlakit::cuda::cache
