#pragma once
// The two consumer warpgroups of the Hopper decode kernel (config.h, fixed roles). Per KV tile:
//   S warpgroup: S = Q K^T with wgmma (Q and K from shared memory), the masks and the online softmax in fp32 (its
//     registers hold the running row maxima and sums), P V into output columns [0, 256) with P from registers, and
//     P and the rows' rescale factors (alpha) stored for the other warpgroup.
//   V warpgroup: rescales output columns [256, 512) by alpha and adds P V into them with P from shared memory.
// Per tile g the tensor cores run Q K^T(g), then (after the softmax) P V(g) of both halves, then Q K^T(g + 1): the
// S warpgroup issues the next Q K^T only once the V warpgroup issued its P V (kBarPV1Issued), so that half 1 of
// the stage goes back to the producer a whole Q K^T earlier than it would if the two were queued the other way.
//
// Accumulator layout and the pieces both warpgroups use: consumer_ops.cuh.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/consumer_ops.cuh"
#include "cuda/decode/sm90/row_prefetch.cuh"
#include "cuda/decode/sm90/smem.cuh"
#include "cuda/decode/sm90/tile_source.cuh"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode::sm90 {

/// The S warpgroup (config.h): Q K^T, softmax and P V of output columns [0, 256) for every tile of the CTA's pieces,
/// then each row's lse (and sparse max_logits) and output factor.
template <bool kBf16, KvKind kKind, bool kSparse, int kDqk, bool kPair>
__device__ __forceinline__ void run_s_warpgroup(const DecodeParams& p, bool use_tma, const Smem& sm,
                                                const PartitionBounds& bounds, int partition, int row_block, int peer) {
  const AccLane at(kSWarpgroup);
  const int lane = at.lane;
  const int tig = at.tig;
  // fp8_e4m3: K and V were dequantised without the per-cache scale, which multiplies S (here) and O (epilogue).
  float kv_scale = 1.0f;
  if constexpr (kKind == KvKind::kE4M3) kv_scale = p.kv_scale != nullptr ? *p.kv_scale : p.kv_scale_value;
  const float scale_log2 = p.softmax_scale * kv_scale * kLog2e;

  float o[128];
  float s[32];
  uint32_t pa[4][4];
  float m[2], l[2];
  float m_max[2];  // sparse max_logits: each row's largest scaled logit (m is only the reference the weights use)
  uint32_t g0 = 0;  // tiles of this CTA before the current piece
  uint32_t piece = 0;

  for_each_piece<kSparse>(p, bounds, partition, kTileShift, [&](const Piece& pc) {
    const int32_t n = pc.n_tiles;
    const int32_t main_len = kSparse ? request_main_len(p.lens, pc.req) : pc.len;  // sparse: main cache's columns
    const int64_t kv_hi = min(int64_t(pc.t_begin + n) * kBlockN, int64_t(pc.len));
    int64_t limit[2];  // visible keys of this thread's rows: [0, limit)
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int mrow = row_block * kRows + at.rloc[k];
      limit[k] = kv_hi;
      if (p.causal && mrow < p.rows) limit[k] = min(kv_hi, causal_limit(p, pc.req, mrow / p.h_q, pc.len));
    }
    zero_o(o);
    m[0] = m[1] = -INFINITY;
    m_max[0] = m_max[1] = -INFINITY;
    l[0] = l[1] = 0.0f;
    LaneIds ids;  // sparse: the ids of the next tile to mask, read while Q (then the previous tile) is awaited
    if constexpr (kSparse) ids = sparse_lane_ids(p, pc.req, int64_t(pc.t_begin) * kBlockN, main_len, pc.len, lane);
    mbar_wait(sm.q_full(), piece & 1);
    fence_proxy_async();  // Q came by cp.async
    issue_qk<kBf16, kDqk>(s, sm, g0, consumer_fences<kKind, kSparse>(use_tma, pc, 0), [] {});

    for (int32_t j = 0; j < n; ++j) {
      const uint32_t g = g0 + j;
      const uint32_t st = g & 1;
      const int64_t t0 = int64_t(pc.t_begin + j) * kBlockN;
      uint64_t valid = ~uint64_t(0);  // sparse decode: rows of invalid ids are masked (they were zero-filled)
      if constexpr (kSparse) {
        valid = sparse_valid_mask(p, ids);
        if (j + 1 < n) ids = sparse_lane_ids(p, pc.req, t0 + kBlockN, main_len, pc.len, lane);
      }
      wgmma_wait<0>();
      fence_registers(s);
      fence_registers(o);
      // Q K^T read the RoPE columns for the last time (V4 has no RoPE part: its columns are V's)
      if (Geometry<kDqk>::kRopePart && lane == 0) release(sm, st, kPartRope, peer);
      if (j + 1 == n && lane == 0) mbar_arrive(sm.q_empty());  // the piece's last Q K^T is done: Q may be replaced
      // The mask in 32-bit arithmetic: each row's visible keys of this tile, and the tile's valid-id bits from this
      // lane's first column on (column c + 2 tig is bit c); c is known at compile time.
      int32_t room[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) room[k] = int32_t(max(min(limit[k] - t0, int64_t(kBlockN)), int64_t(0)));
      uint32_t vbits[2] = {~0u, ~0u};
      if constexpr (kSparse) {
        const uint64_t from_lane = valid >> (2 * tig);
        vbits[0] = uint32_t(from_lane);
        vbits[1] = uint32_t(from_lane >> 32);
      }
      // The maxima over the raw scores, scaled once (a positive scale keeps the order, and rounding is monotonic, so
      // m is what scaling every score would give); each weight is then one FFMA and one MUFU.EX2. fp8_e4m3's scale
      // holds kv_scale, read from device memory where no check sees its sign: its scores are scaled first.
      constexpr bool kRawMax = kKind != KvKind::kE4M3;
      // Each row's maximum over four partial maxima (chains of 4, not one of 16: max is exact in any order). A tile
      // whose every column is visible to all of the warp's rows skips the mask: in dense decode every tile but the
      // last of a request (and, causal with s_q > 1, the few before it), in sparse decode a tile whose 64 ids are all
      // valid (ncu: the mask was about 100 of the 235 instructions before P V could start, the tensor cores idle).
      float part[2][4];
#pragma unroll
      for (int k = 0; k < 2; ++k) part[k][0] = part[k][1] = part[k][2] = part[k][3] = -INFINITY;
      const bool whole =
          __all_sync(0xffffffffu, room[0] == kBlockN && room[1] == kBlockN && (!kSparse || valid == ~uint64_t(0)));
      if (whole) {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          if constexpr (!kRawMax) s[i] *= scale_log2;
          part[(i >> 1) & 1][(i >> 2) & 3] = fmaxf(part[(i >> 1) & 1][(i >> 2) & 3], s[i]);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 32; ++i) {
          const int c = 8 * (i / 4) + (i & 1);
          bool visible = c + 2 * tig < room[(i >> 1) & 1];
          if constexpr (kSparse) visible = visible && ((vbits[c / 32] >> (c % 32)) & 1u) != 0;
          s[i] = visible ? (kRawMax ? s[i] : s[i] * scale_log2) : -INFINITY;
          part[(i >> 1) & 1][(i >> 2) & 3] = fmaxf(part[(i >> 1) & 1][(i >> 2) & 3], s[i]);
        }
      }
      float mx[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) mx[k] = fmaxf(fmaxf(part[k][0], part[k][1]), fmaxf(part[k][2], part[k][3]));
      if constexpr (kRawMax) {
        mx[0] *= scale_log2;
        mx[1] *= scale_log2;
      }
      float m_use[2], alpha[2];
      advance_rows_lazily<kSparse>(mx, m, m_max, l, alpha, m_use);  // nothing visible yet: p = 0
      float psum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        const float x = kRawMax ? fmaf(s[i], scale_log2, -m_use[(i >> 1) & 1]) : s[i] - m_use[(i >> 1) & 1];
        s[i] = exp2_ftz(x);
        psum[(i >> 1) & 1] += s[i];
      }
#pragma unroll
      for (int k = 0; k < 2; ++k) l[k] += psum[k];
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
        for (int r = 0; r < 4; ++r) pa[kk][r] = pack_float2<kBf16>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
      }
      // P and alpha of the previous tile are no longer read by the V warpgroup (its P V is done): replace them. The
      // first tile of a piece needs no such barrier: the V warpgroup finished the previous piece's last P V and read
      // its alpha before kBarEpilogue. That holds because both warpgroups walk every piece and every piece has at
      // least one tile (for_each_piece); a role that skipped a piece or left early would race here and on o_scale.
      if (j > 0) consumer_barrier(kBarPFree);
      if (tig == 0) {
        sm.alpha()[at.rloc[0]] = alpha[0];
        sm.alpha()[at.rloc[1]] = alpha[1];
      }
      // P (row, token) at piece token / 8 of the row: pa[kk][2 t + k] holds rows k, tokens of n-tile 2 kk + t.
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          const uint32_t addr = sm.p() + swizzle128(uint32_t(at.rloc[k]), uint32_t(nt)) + 4 * tig;
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(addr), "r"(pa[nt / 2][2 * (nt % 2) + k]) : "memory");
        }
      }
      // P V of half 0 takes P from registers, so it goes to the tensor cores before the fence and the barrier that
      // only the V warpgroup needs (after the P stores: a wgmma's A registers are not touched while it runs).
      rescale(o, alpha);
      wgmma_fence();
      const uint64_t v = v_operand(sm.stage(st));  // V half 0: chunks 0-3 of the stage
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        pv_rs<(kProducers<kKind, kPair> > 1), kBf16>(o, pa[kk], desc_plus(v, kk * 16 * 128));
      }
      wgmma_commit();
      fence_proxy_async();  // the V warpgroup's wgmma reads P through the async proxy
      consumer_barrier(kBarPReady);
      if (j + 1 < n) {
        consumer_barrier(kBarPV1Issued);  // the tensor cores take P V of half 1 before the next Q K^T
        // This tile's P V of half 0 was committed before the next tile's Q K^T: once the first group of that is
        // committed, V half 0 goes back to the producer as soon as the P V is done, not after the next tile's three
        // parts have landed and been issued (ncu: the producer's wait for this release was 64% of its samples).
        issue_qk<kBf16, kDqk>(s, sm, g + 1, consumer_fences<kKind, kSparse>(use_tma, pc, j + 1), [&] {
          wgmma_wait<1>();
          if (lane == 0) release(sm, st, kPartHalf0, peer);
        });
      }
    }
    wgmma_wait<0>();
    fence_registers(o);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) fence_registers(pa[kk]);
    if (lane == 0) release(sm, (g0 + n - 1) & 1, kPartHalf0, peer);  // the last tile's P V

    // ---- epilogue: each row's lse and output factor (for the V warpgroup too), then this half of the output ----
    float inv[2];
    reduce_row_sums(l);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int mrow = row_block * kRows + at.rloc[k];
      inv[k] = 0.0f;
      if (mrow >= p.rows) continue;
      const bool empty = !(l[k] > 0.0f);
      const float lse = empty ? -INFINITY : (m[k] + log2f(l[k])) * kLn2;
      const int i = mrow / p.h_q;
      const int h = mrow % p.h_q;
      inv[k] = empty ? 0.0f : kv_scale / l[k];
      const bool direct = pc.slot < 0;
      if constexpr (kSparse) {
        if (direct && !empty) inv[k] *= sink_factor(p, h, lse);  // a split row gets it in the combine
        if (p.max_logits != nullptr && tig == 0) {
          // m_max is the row's largest visible logit times log2(e) (tau and kv_scale folded in).
          const float max_logit = empty ? -INFINITY : m_max[k] * kLn2;
          if (direct) {
            p.max_logits[request_offset<kSparse>(p, pc.req, p.max_logits_stride_b, p.max_logits_stride_s) +
                         int64_t(i) * p.max_logits_stride_s + int64_t(h) * p.max_logits_stride_h] = max_logit;
          } else {
            p.part_max[int64_t(pc.slot) * p.rows + mrow] = max_logit;  // the combine takes the largest over the splits
          }
        }
      }
      if (tig == 0) {
        sm.o_scale()[at.rloc[k]] = inv[k];
        if (!direct) {
          p.part_lse[int64_t(pc.slot) * p.rows + mrow] = lse;
        } else if (p.lse != nullptr) {
          p.lse[request_offset<kSparse>(p, pc.req, p.lse_stride_b, p.lse_stride_s) + int64_t(i) * p.lse_stride_s +
                int64_t(h) * p.lse_stride_h] = lse;
        }
      }
    }
    consumer_barrier(kBarEpilogue);
    // The rows again, from an opaque copy of row_block and as row 0 + 8: so derived, they are not kept in registers
    // through the tile loop (ptxas did, and spilled in the 16-bit sparse kernels, without the copy or with rloc[1]).
    int rb = row_block;
    asm volatile("" : "+r"(rb));
    const int mrow[2] = {rb * kRows + at.rloc[0], rb * kRows + at.rloc[0] + 8};
    store_o<kBf16, kSparse>(p, pc, o, mrow, 0, tig, inv);
    g0 += n;
    ++piece;
  });
}

/// The V warpgroup (config.h): rescales output columns [256, 512) and adds P V into them for every tile, then writes
/// them with the factors the S warpgroup left in the epilogue.
template <bool kBf16, KvKind kKind, bool kSparse, int kDqk, bool kPair>
__device__ __forceinline__ void run_v_warpgroup(const DecodeParams& p, bool use_tma, const Smem& sm,
                                                const PartitionBounds& bounds, int partition, int row_block, int peer) {
  const AccLane at(kVWarpgroup);
  float o[128];
  uint32_t g0 = 0;  // tiles of this CTA before the current piece

  for_each_piece<kSparse>(p, bounds, partition, kTileShift, [&](const Piece& pc) {
    const int32_t n = pc.n_tiles;
    // Sparse V3.2 fp8 rows in CTAs without a pair: the rows of the tile kAheadTiles on go to L2 while this warpgroup
    // waits for the next P (row_prefetch.cuh says where it was measured to help, and where not).
    constexpr bool kAhead = kSparse && !kPair && kKind != KvKind::k16Bit && kDqk == kDimQK;
    using Ahead = RowsAhead<kKind, kDqk>;
    Ahead ahead;
    if constexpr (kAhead) ahead = Ahead(p, pc, int(threadIdx.x) - kVWarpgroup * kWarpgroupThreads);
    zero_o(o);
    for (int32_t j = 0; j < n; ++j) {
      const uint32_t g = g0 + j;
      const uint32_t st = g & 1;
      consumer_barrier(kBarPReady);
      const float alpha[2] = {sm.alpha()[at.rloc[0]], sm.alpha()[at.rloc[1]]};
      rescale(o, alpha);
      // Complete long ago (the S warpgroup's Q K^T waited for it): this thread's own acquire of the stage's half 1.
      wait_part(sm, g, kPartHalf1, consumer_fences<kKind, kSparse>(use_tma, pc, j));
      wgmma_fence();
      const uint64_t v = v_operand(sm.stage(st) + kVHalfChunks * kChunkBytes);  // V half 1: chunks 4-7 of the stage
      const uint64_t pd = k_major(sm.p());
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        pv_ss<(kProducers<kKind, kPair> > 1), kBf16>(o, desc_plus(pd, kk * 32), desc_plus(v, kk * 16 * 128));
      }
      wgmma_commit();
      // A bar.sync, though this side publishes nothing there (it only waits until the S warpgroup has issued its P V
      // of half 0): with barrier.arrive, compute-sanitizer racecheck lost the ordering of the other barriers and
      // reported the exchanges of alpha and the output factors as races.
      if (j + 1 < n) consumer_barrier(kBarPV1Issued);
      wgmma_wait<0>();
      fence_registers(o);
      if (at.lane == 0) release(sm, st, kPartHalf1, peer);
      if (j + 1 < n) consumer_barrier(kBarPFree);
      if constexpr (kAhead) ahead.prefetch_then_load(p, pc, j + kAheadTiles);
    }
    // ---- epilogue: the S warpgroup's output factors, then this half of the output ----
    // No second barrier after the reads of o_scale: the S warpgroup rewrites it only in the next piece's epilogue,
    // after that piece's first kBarPReady, which this warpgroup reaches only once these reads are done.
    consumer_barrier(kBarEpilogue);
    const int mrow[2] = {row_block * kRows + at.rloc[0], row_block * kRows + at.rloc[1]};
    float inv[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) inv[k] = mrow[k] < p.rows ? sm.o_scale()[at.rloc[k]] : 0.0f;  // set for those rows only
    store_o<kBf16, kSparse>(p, pc, o, mrow, 1, at.tig, inv);
    g0 += n;
  });
}

}  // namespace mlakit::cuda::decode::sm90
