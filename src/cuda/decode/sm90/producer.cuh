#pragma once
// The producer warpgroup of the Hopper decode kernel: loads Q and the KV tiles into shared memory in the
// 128-byte-swizzled layout that wgmma reads, stage by stage and part by part (config.h).
//   - A whole tile of a cache with pages of >= 16 tokens: TMA (cp.async.bulk.tensor), one box of
//     64 columns x min(P, 64) rows per chunk and page, issued by one thread.
//   - Pages of 1 token, and the last tile of a request when it is partial: cp.async per 16-byte piece by
//     all 128 threads, rows past the request's length zero-filled (never read from memory), so that P.V
//     never multiplies a zero probability by the NaN of a page tail.
//   - Sparse decode: every tile row by row too, each thread from the addresses of its own 4 rows, looked up
//     once per tile (sparse_row_ref: the main cache's ids, then the extra cache's); rows of invalid ids zero-filled.
//   - fp8 caches: every tile through registers, dequantised on the way (producer_fp8.cuh); in a CTA pair each
//     CTA converts half the rows and copies them into the peer's stage too, with two producer warpgroups taking
//     alternate tiles (config.h, kProducers).
//   - Q: cp.async by all 128 threads, query rows past h_q x s_q zero-filled.
// Completion reaches the consumers through the full barriers (128 arrivals: one per producer thread, the
// TMA issuer's carrying the byte count); the producer refills a part after its empty barrier completes.

#include <cuda.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/producer_fp8.cuh"
#include "cuda/decode/sm90/smem.cuh"
#include "cuda/decode/sm90/tile_source.cuh"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode::sm90 {

/// Copies `part` of the tile starting at token t0 row by row with cp.async (all producer threads).
__device__ __forceinline__ void load_part_rows(const DecodeParams& p, const int32_t* table, int32_t len, int64_t t0,
                                               uint32_t stage, int part, int ptid) {
  const int first = part_first_chunk(part);
  const int per_row = part_chunks(part) * 8;  // 16-byte pieces of a row in this part
  const int64_t in_page = (int64_t(1) << p.page_shift) - 1;
  for (int idx = ptid; idx < kBlockN * per_row; idx += kWarpgroupThreads) {
    const int row = idx / per_row;
    const int rest = idx - row * per_row;
    const int chunk = first + rest / 8;
    const int piece = rest % 8;
    const int64_t tok = t0 + row;
    const uint8_t* src = p.pages;
    int bytes = 0;
    if (tok < len) {
      const int64_t page = table[tok >> p.page_shift];
      src = p.pages + page * p.page_stride_bytes + (tok & in_page) * p.row_stride_bytes + chunk * 128 + piece * 16;
      bytes = 16;
    }
    cp_async_16(stage + chunk * kChunkBytes + swizzle128(row, piece), src, bytes);
  }
}

/// Sparse decode: the rows of a tile a producer thread copies, kGatherRows of them, 16 apart (row ptid / 8 + 16 k),
/// so that 8 consecutive threads copy the 8 pieces of one 128-byte chunk of a row. A warp's 32 threads thus copy 16
/// distinct rows, 8 threads each: lane l looks up one of them (row 4 w + l % 4 + 16 (l / 4) of warp w; lanes 16 - 31
/// repeat lanes 0 - 15) and the others take its address by shuffle, so that the warp runs one lookup per tile
/// instead of four (the lookup, an index load and 64-bit address arithmetic, was half of the producer's instructions
/// on 16-bit sparse tiles).
inline constexpr int kGatherRows = kBlockN * 8 / kWarpgroupThreads;  // 4
static_assert(kGatherRows == 4 && kWarpgroupThreads / 32 * 4 * kGatherRows == kBlockN, "16 rows per warp, one per lane");
struct GatherRows {
  const uint8_t* row[kGatherRows];
};

__device__ __forceinline__ GatherRows gather_rows(const DecodeParams& p, int32_t req, int64_t t0, int32_t main_len,
                                                  int32_t len, int ptid) {
  const int lane = ptid % 32;
  const int warp = ptid / 32;
  const int mine = 4 * warp + lane % 4 + 16 * ((lane / 4) % kGatherRows);  // the row this lane looks up
  const uint8_t* looked_up = nullptr;
  with_tile_id_set<true>(t0, kBlockN, main_len, len, [&](auto set) {
    looked_up = sparse_row_ref<false, decltype(set)::value>(p, req, t0 + mine, main_len, len).row;
  });
  const auto bits = reinterpret_cast<uint64_t>(looked_up);
  GatherRows g;
#pragma unroll
  for (int k = 0; k < kGatherRows; ++k) {
    // Row ptid / 8 + 16 k = 4 warp + lane / 8 + 16 k was looked up by lane (lane / 8) + 4 k.
    const int from = lane / 8 + 4 * k;
    const uint32_t lo = __shfl_sync(0xffffffffu, uint32_t(bits), from);
    const uint32_t hi = __shfl_sync(0xffffffffu, uint32_t(bits >> 32), from);
    g.row[k] = reinterpret_cast<const uint8_t*>((uint64_t(hi) << 32) | lo);
  }
  return g;
}

/// Sparse decode: copies `part` of a tile row by row with cp.async from the addresses of gather_rows.
__device__ __forceinline__ void load_part_gathered(const DecodeParams& p, const GatherRows& rows, uint32_t stage,
                                                   int part, int ptid) {
  const int piece = ptid % 8;
#pragma unroll
  for (int k = 0; k < kGatherRows; ++k) {
    const int row = ptid / 8 + 16 * k;
    const bool valid = rows.row[k] != nullptr;
    const uint8_t* src = valid ? rows.row[k] + piece * 16 : p.pages;
#pragma unroll
    for (int c = 0; c < part_chunks(part); ++c) {
      const int chunk = part_first_chunk(part) + c;
      cp_async_16(stage + chunk * kChunkBytes + swizzle128(row, piece), src + (valid ? chunk * 128 : 0), valid ? 16 : 0);
    }
  }
}

/// Issues the TMA boxes of `part` of a whole tile starting at token t0 (one thread).
__device__ __forceinline__ void load_part_tma(const DecodeParams& p, const CUtensorMap* map, const int32_t* table,
                                              int64_t t0, uint32_t stage, int part, uint32_t bar) {
  const int first = part_first_chunk(part);
  const int page_size = 1 << p.page_shift;
  const uint64_t policy = l2_evict_first_policy();  // streamed: each tile is read once per row block
  if (page_size >= kBlockN) {  // the tile is (part of) one page
    const int32_t page = table[t0 >> p.page_shift];
    const int32_t row = int32_t(t0 & (page_size - 1));
    for (int c = 0; c < part_chunks(part); ++c) {
      tma_load_3d_hint(stage + (first + c) * kChunkBytes, map, bar, (first + c) * kSwizzleValues, row, page, policy);
    }
  } else {  // 64 / P pages of P rows; P >= 16 keeps every box 2048-byte (swizzle-atom) aligned
    for (int j = 0; j < (kBlockN >> p.page_shift); ++j) {
      const int32_t page = table[(t0 >> p.page_shift) + j];
      for (int c = 0; c < part_chunks(part); ++c) {
        tma_load_3d_hint(stage + (first + c) * kChunkBytes + j * page_size * 128, map, bar,
                         (first + c) * kSwizzleValues, 0, page, policy);
      }
    }
  }
}

/// Query row m of request `req` (m < p.rows): its first byte in q.
template <bool kSparse>
__device__ __forceinline__ const uint8_t* q_row(const DecodeParams& p, int32_t req, int m) {
  const int i = fast_div(m, p.h_q_div);
  const int h = m - i * p.h_q;
  const int64_t at = request_offset<kSparse>(p, req, p.q_stride_b, p.q_stride_s) + int64_t(i) * p.q_stride_s +
                     int64_t(h) * p.q_stride_h;
  return static_cast<const uint8_t*>(p.q) + at * 2;
}

/// Copies the 64 query rows of block `row_block` of request `req` (all producer threads): thread t takes the 16-byte
/// piece t % 8 of every chunk of rows t / 8 + 16 k, as gather_rows does for KV rows, so that it finds 4 row addresses
/// instead of one per copy. `t` passes through an empty asm first: otherwise ptxas hoists the per-copy offsets out
/// of the tile loop, and with the 72 registers it had then it spilled them and reloaded them right when Q is awaited
/// (2026-11-25).
template <bool kSparse, int kDqk>
__device__ __forceinline__ void load_q(const DecodeParams& p, int32_t req, int row_block, uint32_t dst, int ptid) {
  int t = ptid;
  asm volatile("" : "+r"(t));
  const int piece = t % 8;
#pragma unroll
  for (int k = 0; k < kRows / 16; ++k) {
    const int row = t / 8 + 16 * k;
    const int m = row_block * kRows + row;
    const bool valid = m < p.rows;
    const uint8_t* src = valid ? q_row<kSparse>(p, req, m) + piece * 16 : static_cast<const uint8_t*>(p.q);
#pragma unroll
    for (int c = 0; c < Geometry<kDqk>::kQkChunks; ++c) {
      cp_async_16(dst + c * kChunkBytes + swizzle128(uint32_t(row), uint32_t(piece)), src + (valid ? c * 128 : 0),
                  valid ? 16 : 0);
    }
  }
}

/// Prefetches into L2 the query rows of block `row_block` of request `req` (one row per thread of the first 64), so
/// that the Q copy of the next request waits on L2 rather than DRAM: that copy can start only once the last Q K^T of
/// the request before it is done, and at 64 heads a sparse CTA starts a new request every 10 tiles.
template <bool kSparse, int kDqk>
__device__ __forceinline__ void prefetch_q(const DecodeParams& p, int32_t req, int row_block, int ptid) {
  const int m = row_block * kRows + ptid;
  if (ptid < kRows && req < p.batch && m < p.rows) bulk_prefetch_l2(q_row<kSparse>(p, req, m), kDqk * 2);
}

/// Loads the Q block of piece number `piece` of this CTA once the consumers released the previous one.
template <bool kSparse, int kDqk>
__device__ __forceinline__ void load_q_once(const DecodeParams& p, const Smem& sm, int32_t req, int row_block,
                                            uint32_t piece, int ptid) {
  mbar_wait(sm.q_empty(), (piece & 1) ^ 1);
  load_q<kSparse, kDqk>(p, req, row_block, sm.q(), ptid);
  mbar_arrive_on_cp_async(sm.q_full());
}

/// `peer`: the other CTA of a pair (fp8 caches, config.h), or -1 (kPair false). `producer`: which of the
/// kProducers<kKind, kPair> producer warpgroups this is; producer k fills the tiles g with g % kProducers = k
/// (config.h).
template <bool kBf16, KvKind kKind, bool kSparse, int kDqk, bool kPair>
__device__ __forceinline__ void run_producer(const DecodeParams& p, const CUtensorMap* map, bool use_tma,
                                             const Smem& sm, const PartitionBounds& bounds, int partition,
                                             int row_block, int peer, int producer) {
  constexpr int kStride = kProducers<kKind, kPair>;  // tiles from one of this producer's tiles to its next
  static_assert(kStride == 1 || kStride == kStages, "producer k fills stage k");
  const int ptid = int(threadIdx.x) - (kProducer + producer) * kWarpgroupThreads;
  uint32_t g = 0;  // tiles of this CTA so far: stage g % 2, its use (g / 2)
  uint32_t piece = 0;
  for_each_piece<kSparse>(p, bounds, partition, kTileShift, [&](const Piece& pc) {
    if (producer == 0) prefetch_q<kSparse, kDqk>(p, pc.req + 1, row_block, ptid);  // the next piece's, likely
    const int32_t* table = kSparse ? nullptr : request_pages(p, pc.req);
    // Sparse: index columns [0, main_len) name main-cache rows, the rest extra-cache rows (main_len = len without one).
    const int32_t main_len = kSparse ? request_main_len(p.lens, pc.req) : pc.len;
    RowRef carry[kFp8Passes] = {};  // fp8: the next tile's row lookups, made by this tile's prefetch
    for (int32_t j = 0; j < pc.n_tiles; ++j, ++g) {
      const uint32_t st = g & 1;
      const uint32_t free_parity = ((g >> 1) & 1) ^ 1;  // a fresh barrier counts as freed once
      const int64_t t0 = int64_t(pc.t_begin + j) * kBlockN;
      if constexpr (kKind != KvKind::k16Bit) {
        if (kStride == kStages && int(st) != producer) continue;  // the other producer's tile
        // The tile before Q, as for 16-bit caches: Q waits for the previous piece's last Q K^T, and converting this
        // piece's first tile meanwhile keeps the producer busy (Q first stalled it for a whole tile per piece). The
        // producer of a piece's first tile loads its Q.
        load_tile_fp8<kBf16, kKind, kSparse, kDqk, !kPair, kStride>(p, pc.req, main_len, pc.len, t0,
                                                                    j + kStride < pc.n_tiles, sm, st, free_parity,
                                                                    ptid, peer, producer, carry, j >= kStride);
        if (j == 0) load_q_once<kSparse, kDqk>(p, sm, pc.req, row_block, piece, ptid);
        continue;
      }
      const bool tma = !tile_by_rows<kKind, kSparse>(use_tma, pc, j);  // the consumers fence by the same rule
      const uint32_t stage = sm.stage(st);
      GatherRows rows{};
      if constexpr (kSparse) rows = gather_rows(p, pc.req, t0, main_len, pc.len, ptid);
      // The order the S warpgroup computes Q K^T in: RoPE (V3 only), V half 0, V half 1.
      constexpr int order[3] = {kPartRope, kPartHalf0, kPartHalf1};
#pragma unroll
      for (int k = 3 - Geometry<kDqk>::kParts; k < 3; ++k) {
        const int part = order[k];
        mbar_wait(sm.empty(st, part), free_parity);
        if (kSparse) {
          load_part_gathered(p, rows, stage, part, ptid);
          mbar_arrive_on_cp_async(sm.full(st, part));
        } else if (tma) {
          if (ptid == 0) {
            mbar_arrive_expect_tx(sm.full(st, part), part_bytes(part));
            load_part_tma(p, map, table, t0, stage, part, sm.full(st, part));
          } else {
            mbar_arrive(sm.full(st, part));
          }
        } else {
          load_part_rows(p, table, pc.len, t0, stage, part, ptid);
          mbar_arrive_on_cp_async(sm.full(st, part));
        }
      }
      if (j == 0) load_q_once<kSparse, kDqk>(p, sm, pc.req, row_block, piece, ptid);  // the first tile's copies are in flight
    }
    ++piece;
  });
  cp_async_wait_all();  // no thread leaves with copies in flight
}

}  // namespace mlakit::cuda::decode::sm90
