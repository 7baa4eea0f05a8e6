#pragma once
// The fp8 caches (fp8_e4m3, fp8_ds_mla) in the Hopper producer, dense and sparse alike: wgmma reads 16-bit
// operands, so the producer loads each tile's fp8 rows into registers, dequantises them (smxx/dequant.cuh: the same
// rounding as the portable path) and stores them in the swizzled 16-bit layout of a stage. The stage holds
// 16-bit values and shared memory has no room left for a raw fp8 copy beside it (Q and two stages take 216 KB),
// so the copy goes through registers rather than cp.async or TMA.
//
// Each producer thread takes two rows of a tile, ptid / 4 and ptid / 4 + 32 (in a CTA pair, config.h, only the one
// of its CTA's half, the peer converting the other); the 4 threads of a row read 64 contiguous bytes per load
// instruction (16 bytes each), so every 32-byte sector fetched is used whole. A row's
// loads are all issued before the first is used, and the rows of the next tile are prefetched into L2 (one bulk
// prefetch per row) while this one is converted: the registers then wait on L2, not on DRAM.
// A row that is not read (past the request's length, an invalid sparse id) is stored as zeros, never loaded.
//
// What limits it (docs/performance.md): 72 registers per producer thread hold one pass of loads (two passes per
// tile without a pair, each waited for before it is converted), and the conversions issue from the same 4 warps.
// With pairs at 128 heads the consumers' row-maximum exchange is the larger stall (the 2026-11-25 profile).

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/smem.cuh"
#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/dequant.cuh"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode::sm90 {

inline constexpr int kFp8ThreadsPerRow = 4;
inline constexpr int kFp8RowsPerPass = kWarpgroupThreads / kFp8ThreadsPerRow;  // 32
inline constexpr int kFp8Passes = kBlockN / kFp8RowsPerPass;                   // 2
inline constexpr int kLatentLoads = kDimC / (16 * kFp8ThreadsPerRow);          // 8: load j covers chunk j
static_assert(kLatentLoads * kSwizzleValues == kDimC, "latent load j of a thread fills two pieces of chunk j");

/// What one thread loads of one row: 16-byte pieces q + 4 j of the latent part (columns [64 j + 16 q, +16)),
/// its share of the RoPE part, and (fp8_ds_mla) the row's four group scales.
template <KvKind kKind>
struct Fp8Row {
  static constexpr int kRopeLoads = kKind == KvKind::kDsMla ? 2 : 1;  // 128 bf16 bytes or 64 e4m3 bytes per row
  uint4 latent[kLatentLoads];
  uint4 rope[kRopeLoads];
  float4 scales;
};

/// Loads thread q's share of the row at `row` (null: zeros, nothing read).
template <KvKind kKind>
__device__ __forceinline__ void load_fp8_row(const uint8_t* row, int q, Fp8Row<kKind>& r) {
  const uint4 zero = make_uint4(0, 0, 0, 0);
  constexpr int kLatentBase = kKind == KvKind::kDsMla ? ds_mla::kQuantOffset : 0;
#pragma unroll
  for (int j = 0; j < kLatentLoads; ++j) {
    r.latent[j] = row ? __ldg(reinterpret_cast<const uint4*>(row + kLatentBase + 16 * (q + 4 * j))) : zero;
  }
  if constexpr (kKind == KvKind::kDsMla) {
#pragma unroll
    for (int k = 0; k < 2; ++k) {  // bf16 pieces q and q + 4: columns 512 + 8 (q + 4 k)
      r.rope[k] = row ? __ldg(reinterpret_cast<const uint4*>(row + ds_mla::kRopeOffset + 16 * (q + 4 * k))) : zero;
    }
    r.scales = row ? __ldg(reinterpret_cast<const float4*>(row + ds_mla::kScaleOffset)) : make_float4(0, 0, 0, 0);
  } else {  // e4m3 piece q: columns 512 + 16 q
    r.rope[0] = row ? __ldg(reinterpret_cast<const uint4*>(row + kDimC + 16 * q)) : zero;
  }
}

/// Dequantises a thread's share of row `row` of a tile and stores it into the stage at generic address `stage`.
template <bool kBf16, KvKind kKind>
__device__ __forceinline__ void store_fp8_row(const Fp8Row<kKind>& r, uint8_t* stage, int row, int q) {
  auto put = [&](int chunk, int piece, uint4 v) {
    *reinterpret_cast<uint4*>(stage + chunk * kChunkBytes + swizzle128(uint32_t(row), uint32_t(piece))) = v;
  };
  const float scales[ds_mla::kNumGroups] = {r.scales.x, r.scales.y, r.scales.z, r.scales.w};
#pragma unroll
  for (int j = 0; j < kLatentLoads; ++j) {
    const uint2 lo = make_uint2(r.latent[j].x, r.latent[j].y);
    const uint2 hi = make_uint2(r.latent[j].z, r.latent[j].w);
    if constexpr (kKind == KvKind::kDsMla) {
      const float s = scales[j * kSwizzleValues / ds_mla::kGroupSize];
      put(j, 2 * q, e4m3x8_scaled_to<kBf16>(lo, s));
      put(j, 2 * q + 1, e4m3x8_scaled_to<kBf16>(hi, s));
    } else {
      put(j, 2 * q, e4m3x8_to<kBf16>(lo));
      put(j, 2 * q + 1, e4m3x8_to<kBf16>(hi));
    }
  }
  if constexpr (kKind == KvKind::kDsMla) {
    put(kRopeChunk, q, bf16x8_to<kBf16>(r.rope[0]));
    put(kRopeChunk, q + 4, bf16x8_to<kBf16>(r.rope[1]));
  } else {
    put(kRopeChunk, 2 * q, e4m3x8_to<kBf16>(make_uint2(r.rope[0].x, r.rope[0].y)));
    put(kRopeChunk, 2 * q + 1, e4m3x8_to<kBf16>(make_uint2(r.rope[0].z, r.rope[0].w)));
  }
}

/// Fills stage `st` with the tile of plan request `req` starting at token (or index column) t0, all three parts,
/// once their empty barriers allow (parity free_parity), and arrives on their full barriers. `has_next`: the
/// request has a tile after this one in this piece, whose rows are prefetched into L2. `peer` >= 0 (a CTA pair,
/// config.h): this CTA converts only its half of the rows (pass = its rank) and copies them into the peer's stage,
/// completing on the peer's full barriers; its own full barriers expect the peer's half the same way.
template <bool kBf16, KvKind kKind, bool kSparse>
__device__ __forceinline__ void load_tile_fp8(const DecodeParams& p, int32_t req, int32_t len, int64_t t0,
                                              bool has_next, const Smem& sm, uint32_t st, uint32_t free_parity,
                                              int ptid, int peer) {
  static_assert(kFp8Passes == 2 && kFp8RowsPerPass == kPairRows, "a pair splits a tile by passes");
  constexpr int kRowBytes = kv_kind_row_bytes(kKind);
  const int q = ptid % kFp8ThreadsPerRow;
  const int row0 = ptid / kFp8ThreadsPerRow;
  const int first_pass = peer >= 0 ? (peer ^ 1) : 0;  // a pair: this CTA's rank
  const int end_pass = peer >= 0 ? first_pass + 1 : kFp8Passes;
  if (has_next && q == 0) {
    for (int k = first_pass; k < end_pass; ++k) {
      const int64_t off = kv_row_offset<kSparse>(p, req, t0 + kBlockN + row0 + kFp8RowsPerPass * k, len);
      if (off >= 0) bulk_prefetch_l2(p.pages + off, kRowBytes);
    }
  }
  uint8_t* stage = sm.ptr + (sm.stage(st) - sm.base);
#pragma unroll 1
  for (int k = first_pass; k < end_pass; ++k) {
    const int row = row0 + kFp8RowsPerPass * k;
    const int64_t off = kv_row_offset<kSparse>(p, req, t0 + row, len);
    Fp8Row<kKind> r;
    load_fp8_row<kKind>(off >= 0 ? p.pages + off : nullptr, q, r);
    if (k == first_pass) {
#pragma unroll
      for (int part = 0; part < kParts; ++part) mbar_wait(sm.empty(st, part), free_parity);
    }
    store_fp8_row<kBf16, kKind>(r, stage, row, q);
  }
  fence_proxy_async();  // the consumers' wgmma (and a copy to the peer) read these stores through the async proxy
  if (peer < 0) {
#pragma unroll
    for (int part = 0; part < kParts; ++part) mbar_arrive(sm.full(st, part));
    return;
  }
  named_barrier_sync(kBarProducer, kWarpgroupThreads);  // every row of this CTA's half is stored
  if (ptid == 0) {
    const uint32_t half = uint32_t(first_pass) * kPairChunkBytes;
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      // The peer's half of this stage lands on this CTA's full barrier: expect its bytes with this arrival.
      mbar_arrive_expect_tx(sm.full(st, part), part_pair_bytes(part));
      for (int c = 0; c < part_chunks(part); ++c) {
        const uint32_t at = sm.stage(st) + (part_first_chunk(part) + c) * kChunkBytes + half;
        bulk_copy_to_peer(at, at, kPairChunkBytes, sm.full(st, part), uint32_t(peer));
      }
    }
  } else {
#pragma unroll
    for (int part = 0; part < kParts; ++part) mbar_arrive(sm.full(st, part));
  }
}

}  // namespace mlakit::cuda::decode::sm90
