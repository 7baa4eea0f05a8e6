#pragma once
// The portable decode kernel's raw KV rows (kernel.cuh): each row copied into shared memory as it is stored, in
// 16-byte cp.async pieces (a null row zero-filled, never read), and a raw fp8 tile dequantised there into the 16-bit
// compute tile, exactly for fp8_e4m3 (its per-cache scale folds into tau and the output), with each group scale
// multiplied in fp32 and rounded once for fp8_ds_mla and fp8_ds_v4.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ue8m0.cuh"
#include "cuda/decode/sm80/config.h"
#include "cuda/decode/smxx/dequant.cuh"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode {

inline constexpr int kChunk = 16;  // bytes per cp.async / vector access

template <KvKind kKind, int kDqk>
struct RawRow {
  static constexpr int kBytes = kv_kind_row_bytes(kKind, kDqk);
  static constexpr int kChunks = kBytes / kChunk;  // 72, 36, 41 or 36 cp.async per row (V3: 16-bit, e4m3, ds_mla; ds_v4)
  /// 16-byte pieces, then for fp8_ds_v4 one 8-byte piece: the scale block, stored at kBytes in the raw row.
  static constexpr int kPieces = kChunks + (kKind == KvKind::kDsV4 ? 1 : 0);
  static constexpr int kStride = raw_row_stride(kKind, kDqk);
  static_assert(kBytes % kChunk == 0, "rows are copied in 16-byte pieces");
};

/// Copies piece `ch` (RawRow::kPieces) of a row into shared memory at dst; a null row zero-fills it and reads nothing.
/// A split row (ref.k_pe set: 16-bit and fp8_e4m3 caches) takes its pieces past kv_c from its k_pe part.
template <KvKind kKind, int kDqk>
__device__ __forceinline__ void copy_row_piece(uint32_t dst, const RowRef& ref, const uint8_t* any, int ch) {
  using RR = RawRow<kKind, kDqk>;
  const bool valid = ref.row != nullptr;
  if constexpr (kKind == KvKind::k16Bit || kKind == KvKind::kE4M3) {
    constexpr int kLatentChunks = RR::kBytes / kDqk * (kDqk - kDimR) / kChunk;  // kv_c's pieces: 64 or 32 (V3)
    const uint8_t* src = ref.k_pe != nullptr && ch >= kLatentChunks ? ref.k_pe + (ch - kLatentChunks) * kChunk
                                                                     : ref.row + ch * kChunk;
    cp_async_16(dst + ch * kChunk, valid ? src : any, valid ? kChunk : 0);
  } else if (kKind != KvKind::kDsV4 || ch < RR::kChunks) {
    cp_async_16(dst + ch * kChunk, valid ? ref.row + ch * kChunk : any, valid ? kChunk : 0);
  } else {
    cp_async_8(dst + RR::kBytes, valid ? ref.scales : any, valid ? ds_v4::kScaleBytes : 0);
  }
}

/// Which vectors of a row a call may see: any, or (fp8_ds_mla) only latent ones or only RoPE ones, so that the branch
/// between the two is resolved at compile time where the caller knows the side.
enum class VecSide { kAny, kLatent, kRope };

/// The 8 values of output vector `ch` (columns [8 ch, 8 ch + 8)) of a raw fp8 row, dequantised into q's type.
template <bool kBf16, KvKind kKind, int kDqk, VecSide kSide = VecSide::kAny>
__device__ __forceinline__ uint4 dequant_vector(const uint8_t* row, int ch) {
  if constexpr (kKind == KvKind::kE4M3) {
    return e4m3x8_to<kBf16>(*reinterpret_cast<const uint2*>(row + ch * kVec16));
  } else if constexpr (kKind == KvKind::kDsV4) {
    constexpr int kLatentChunks = ds_v4::kDimC / kVec16;         // 56
    constexpr int kChunksPerGroup = ds_v4::kGroupSize / kVec16;  // 8
    if (ch < kLatentChunks) {
      const uint2 in = *reinterpret_cast<const uint2*>(row + ch * kVec16);
      const float s = ue8m0_to_float(row[ds_v4::kTokenBytes + ch / kChunksPerGroup]);
      if constexpr (kBf16) {
        // A UE8M0 scale is a power of two: multiplied in bf16 (dequant.cuh), bit-identical to the fp32 route.
        return e4m3x8_pow2_scaled_to_bf16(in, __float2bfloat162_rn(s));
      } else {
        return e4m3x8_scaled_to<kBf16>(in, s);
      }
    }
    return bf16x8_to<kBf16>(*reinterpret_cast<const uint4*>(row + ds_v4::kRopeOffset + (ch - kLatentChunks) * kChunk));
  } else {  // kDsMla
    constexpr int kLatentChunks = ds_mla::kDimC / kVec16;         // 64
    constexpr int kChunksPerGroup = ds_mla::kGroupSize / kVec16;  // 16
    if (kSide == VecSide::kLatent || (kSide == VecSide::kAny && ch < kLatentChunks)) {
      const float s =
          *reinterpret_cast<const float*>(row + ds_mla::kScaleOffset + (ch / kChunksPerGroup) * int(sizeof(float)));
      return e4m3x8_scaled_to<kBf16>(*reinterpret_cast<const uint2*>(row + ds_mla::kQuantOffset + ch * kVec16), s);
    }
    return bf16x8_to<kBf16>(*reinterpret_cast<const uint4*>(row + ds_mla::kRopeOffset + (ch - kLatentChunks) * kChunk));
  }
}

/// Dequantises one raw fp8 tile (kBlockN rows) into the 16-bit compute tile. The vectors of a row are taken in two
/// passes of power-of-two width (its first 64 vectors, then the 8 left in V3's geometry), so that each thread keeps one
/// vector index for a whole pass and only steps from row to row: with one flat index over rows x 72 vectors every
/// vector cost a division and a remainder by 72 (the conversion was about 60% of this kernel's instructions per key
/// at 16 query rows, docs/experiments/smxx-sparse-few-rows-study.md). Consecutive threads still take consecutive
/// vectors of a row, so the raw reads and the tile writes stay free of bank conflicts.
template <bool kBf16, KvKind kKind, int kThreads, int kDqk>
__device__ __forceinline__ void dequant_tile(const uint8_t* raw, uint8_t* tile, int tid) {
  constexpr int kOutChunks = kDqk / kVec16;  // 72 (V3) or 64 (V4) vectors of 8 values per row
  constexpr int kFirst = 64;                 // vectors of the first pass
  constexpr int kRest = kOutChunks - kFirst;  // 8 (V3) or 0
  constexpr int kStride = RawRow<kKind, kDqk>::kStride;
  constexpr int kRestOr1 = kRest == 0 ? 1 : kRest;  // the checks of the second pass, written so that none divides by 0
  static_assert(kOutChunks >= kFirst && kThreads % kFirst == 0 && (kRest == 0 || kThreads % kRestOr1 == 0),
                "each pass gives every thread one vector index");
  static_assert(kBlockN % (kThreads / kFirst) == 0 && (kRest == 0 || kBlockN % (kThreads / kRestOr1) == 0),
                "every thread converts the same number of vectors");
  // fp8_ds_mla: the first pass is its 64 e4m3 vectors, the second its 8 bf16 RoPE ones.
  constexpr bool kDsMla = kKind == KvKind::kDsMla;
  static_assert(!kDsMla || ds_mla::kDimC / kVec16 == kFirst, "fp8_ds_mla's passes are its latent and RoPE parts");
  {
    const int ch = tid % kFirst;
#pragma unroll 4
    for (int tok = tid / kFirst; tok < kBlockN; tok += kThreads / kFirst) {
      *reinterpret_cast<uint4*>(tile + tok * kSmemRowBytes + ch * kChunk) =
          dequant_vector<kBf16, kKind, kDqk, kDsMla ? VecSide::kLatent : VecSide::kAny>(raw + tok * kStride, ch);
    }
  }
  if constexpr (kRest > 0) {
    const int ch = kFirst + tid % kRest;
#pragma unroll
    for (int tok = tid / kRest; tok < kBlockN; tok += kThreads / kRest) {
      *reinterpret_cast<uint4*>(tile + tok * kSmemRowBytes + ch * kChunk) =
          dequant_vector<kBf16, kKind, kDqk, kDsMla ? VecSide::kRope : VecSide::kAny>(raw + tok * kStride, ch);
    }
  }
}

}  // namespace mlakit::cuda::decode
