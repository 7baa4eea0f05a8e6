#pragma once
// MLA decode on SM80+ tensor cores: dense (issue 3, docs/spec.md section 1) and sparse (issue 9, section 2).
// Device code only.
//
// One CTA = one row block (up to 64 query rows, h_q x s_q folded into M) x one partition of the
// batch's KV work (plan.cu). Sparse decode is the same kernel with kSparse: its plan requests are single
// query tokens (b, i), so a CTA's rows are heads, and the "tokens" of a request are its index columns, whose
// rows are found through indices instead of the block table. An invalid id (negative, or past the cache)
// is never dereferenced: its row is zero-filled and masked out of the softmax. A CTA walks the (request, tile range) pieces of its partition; for each it
// streams 32-token KV tiles through shared memory with cp.async (kStages deep) and runs an online
// softmax in fp32.
//
// Warps: W = warps_per_group(row groups) per row group of 16 rows (4 when the CTA has one row group,
// else 2). Warp (rg, w) computes S = Q K^T for its 16 rows and tokens [w 32/W, (w + 1) 32/W) of the
// tile over all 576 columns, the W warps exchange row maxima and their bf16/fp16 P fragments through
// shared memory, and then each accumulates O for output columns [w 512/W, (w + 1) 512/W) over all 32
// tokens: 16 x 512/W fp32 = 128 (W = 2) or 64 (W = 4) registers per thread. K and V are the same
// shared-memory tile (V = first 512 columns).
//
// fp8 caches are copied raw and dequantised in shared memory into q's dtype (exactly for fp8_e4m3,
// whose per-cache scale folds into tau and the output; fp8_ds_mla and fp8_ds_v4 multiply each group scale in
// fp32 and round once).
//
// kDqk is d_qk: 576 (DeepSeek V3, d_c 512 + d_r 64) or 512 (V4, d_c 448 + d_r 64, sparse only). Both have V =
// the first kDimV = 512 columns of K (V4's whole row), so only the Q.K^T depth and the row layouts change. Sparse
// decode with V4's extra cache reads a request's index columns past its main ones from the second pool
// (sparse_row_ref).

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/decode/sm80/config.h"
#include "cuda/decode/sm80/raw_rows.cuh"
#include "cuda/decode/smxx/cta_plan.cuh"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode {

inline constexpr int kWarpSize = 32;

template <bool kBf16, KvKind kKind, int kRowGroups, bool kSparse, int kDqk>
__global__ void __launch_bounds__(kRowGroups * warps_per_group(kRowGroups) * kWarpSize, 1)
    decode_kernel(const DecodeParams p) {
  static_assert(kDqk == kDimQK || (kDqk == kDimQKV4 && kSparse), "V4 geometry is served for sparse decode only");
  static_assert((kKind == KvKind::kDsV4) <= (kDqk == kDimQKV4), "fp8_ds_v4 holds V4 rows only");
  constexpr int kW = warps_per_group(kRowGroups);  // warps per row group
  constexpr int kWarps = kRowGroups * kW;
  constexpr int kThreads = kWarps * kWarpSize;
  constexpr int kRows = kRowGroups * kRowsPerGroup;
  constexpr SmemLayout kSmem = smem_layout(kKind, kRowGroups, kSparse, kDqk);
  constexpr int kQChunks = kDqk / kVec16;     // 72 (V4: 64) 16-byte pieces per q row
  constexpr int kKSteps = kDqk / 16;          // 36 (V4: 32) mma k-steps for Q K^T
  constexpr int kTokW = kBlockN / kW;         // tokens of the tile whose scores a warp computes: 16 or 8
  constexpr int kNT = kTokW / 8;              // their n-tiles: 2 or 1
  constexpr int kChains = 4 / kNT;            // accumulator sets per n-tile: 4 independent mma chains
  constexpr int kColsW = kDimV / kW;          // output columns a warp accumulates: 256 or 128
  constexpr int kNTilesO = kColsW / 8;        // their n-tiles: 32 or 16
  using RR = RawRow<kKind, kDqk>;
  // KV copy: warp w copies tokens [w * kLoadTok, (w + 1) * kLoadTok) of each tile, one row at a time
  // with its 32 lanes on consecutive 16-byte pieces (512 contiguous bytes per instruction, 4 whole
  // 128-byte lines), instead of 16 rows x 32 bytes per instruction (version 3).
  constexpr int kLoadTok = kBlockN / kWarps;                            // 16, 8 or 4
  constexpr int kLoadIters = (RR::kPieces + kWarpSize - 1) / kWarpSize;  // 3, 2 or 2
  static_assert(kBlockN % kWarps == 0 && kLoadTok <= kWarpSize, "one lane looks up the page of each row");
  static_assert(kTokW % 8 == 0 && kKSteps % 2 == 0 && kNTilesO % 2 == 0);

  extern __shared__ __align__(128) uint8_t smem[];
  uint8_t* const q_smem = smem + kSmem.q_off;
  uint8_t* const raw_smem = smem + kSmem.raw_off;
  uint2* const xch_p = reinterpret_cast<uint2*>(smem + kSmem.xch_p_off);
  float* const xch_m = reinterpret_cast<float*>(smem + kSmem.xch_m_off);
  uint8_t* const row_valid = smem + kSmem.valid_off;  // [kStages][kBlockN], sparse decode only

  const int tid = threadIdx.x;
  const int lane = tid % kWarpSize;
  const int warp = tid / kWarpSize;
  const int rg = warp % kRowGroups;
  const int wi = warp / kRowGroups;  // this warp's index inside its row group
  const int gid = lane / 4;  // row inside an 8-row half of the mma tile
  const int tig = lane % 4;  // thread in group: column pair
  const int row_block = blockIdx.x;
  const int part = blockIdx.y;
  const int group_barrier = 1 + rg;
  constexpr int kGroupThreads = kW * kWarpSize;

  pdl_wait();  // q, the cache, seq_lens and the plan may all come from the previous kernels

  float kv_scale = 1.0f;
  if constexpr (kKind == KvKind::kE4M3) kv_scale = p.kv_scale != nullptr ? *p.kv_scale : p.kv_scale_value;
  const float scale_log2 = p.softmax_scale * kv_scale * kLog2e;

  const PartitionBounds* bounds = partition_bounds<kSparse, kThreads>(p, part, kTileShift, row_block == 0);
  const PartitionStart pstart = bounds->start, pend = bounds->end;

  const uint32_t q_base = smem_addr(q_smem);
  const uint32_t raw_base = smem_addr(raw_smem);
  const uint32_t tile_base = kKind == KvKind::k16Bit ? raw_base : smem_addr(smem + kSmem.tile_off);
  float* const my_x = xch_m + (rg * kW + wi) * kRowsPerGroup;
  const float* const group_x = xch_m + rg * kW * kRowsPerGroup;

  for (int32_t r = pstart.req; r < p.batch && (r < pend.req || (r == pend.req && pend.tile > 0)); ++r) {
    const int32_t len = request_len<kSparse>(p.lens, r);
    int32_t main_len = len;  // sparse with an extra cache: columns from main_len on are the extra cache's
    if constexpr (kSparse) main_len = request_main_len(p.lens, r);
    const int32_t tiles = request_tiles(len, kTileShift);
    const int32_t t_begin = r == pstart.req ? pstart.tile : 0;
    const int32_t t_end = r == pend.req ? pend.tile : tiles;
    const int32_t n_tiles = t_end - t_begin;
    if (n_tiles <= 0) continue;
    const int64_t kv_hi = min(int64_t(t_end) * kBlockN, int64_t(len));

    // Visible-key limit of this thread's two rows (gid and gid + 8 of the warp's 16).
    int64_t limit[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int m = row_block * kRows + rg * kRowsPerGroup + gid + 8 * k;
      limit[k] = kv_hi;
      if (p.causal && m < p.rows) {
        const int i = m / p.h_q;
        limit[k] = min(kv_hi, causal_limit(p, r, i, len));
      }
    }

    // ---- Q rows of this request into shared memory ----
    const uint8_t* q_req = static_cast<const uint8_t*>(p.q) + request_offset<kSparse>(p, r, p.q_stride_b, p.q_stride_s) * 2;
    for (int c = tid; c < kRows * kQChunks; c += kThreads) {
      const int row = c / kQChunks;
      const int ch = c % kQChunks;
      const int m = row_block * kRows + row;
      const uint8_t* src = static_cast<const uint8_t*>(p.q);
      int bytes = 0;
      if (m < p.rows) {
        const int i = m / p.h_q;
        const int h = m % p.h_q;
        src = q_req + (int64_t(i) * p.q_stride_s + int64_t(h) * p.q_stride_h + ch * kVec16) * 2;
        bytes = kChunk;
      }
      cp_async_16(q_base + row * kSmemRowBytes + ch * kChunk, src, bytes);
    }

    // KV tiles: lane t < kLoadTok of each warp looks up where row t of the warp's rows lives once per tile
    // (its address, null for a row that is not read); the warp then copies its rows, taking each address
    // from that lane by shuffle. The addresses of the tile after next are looked up one iteration
    // early, so the block-table latency hides behind the math; sparse ids are read one iteration before
    // that (tile_id) and resolved then, so the index load does not stall the lookup either.
    auto row_ref = [&](int32_t tile) -> RowRef {
      const int64_t t = int64_t(tile) * kBlockN + warp * kLoadTok + lane;
      if (lane >= kLoadTok || t >= kv_hi) return RowRef{nullptr, nullptr};
      if constexpr (kSparse) {
        return sparse_row_ref<kKind == KvKind::kDsV4>(p, r, t, main_len, len);
      } else {
        return dense_row_ref(p, r, t, len);
      }
    };
    // Sparse: this lane's id of a tile, read one iteration before row_ref would need it (sparse_row_ref_of resolves
    // it then), so that the id load's latency passes under a tile of math instead of stalling the lookup (ncu: the
    // compare right after the id load was the portable kernel's hottest instruction at 16 heads).
    auto tile_id = [&](int32_t tile) -> SparseId {
      const int64_t t = int64_t(tile) * kBlockN + warp * kLoadTok + lane;
      if constexpr (kSparse) {
        if (lane < kLoadTok && t < kv_hi) return sparse_id<IdSet::kMixed>(p, r, t, main_len, len);
      }
      return SparseId{-1, false};  // no row: a lane that looks up nothing, or past the partition (t >= kv_hi)
    };
    // Row `src_lane`'s address from the lane that looked it up (the scale pointer only where the format has one).
    auto shfl_ref = [&](const RowRef& mine, int src_lane) -> RowRef {
      RowRef ref;
      ref.row = reinterpret_cast<const uint8_t*>(
          __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine.row), src_lane));
      ref.scales = nullptr;
      if constexpr (kKind == KvKind::kDsV4) {
        ref.scales = reinterpret_cast<const uint8_t*>(
            __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine.scales), src_lane));
      }
      ref.k_pe = nullptr;
      if constexpr (!kSparse && (kKind == KvKind::k16Bit || kKind == KvKind::kE4M3)) {
        if (p.k_pe_pages != nullptr) {  // a split cache: the same for every lane, so the warp stays converged
          ref.k_pe = reinterpret_cast<const uint8_t*>(
              __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(mine.k_pe), src_lane));
        }
      }
      return ref;
    };
    auto load_tile = [&](int stage, const RowRef& lane_ref) {
      if constexpr (kSparse) {
        if (lane < kLoadTok) row_valid[stage * kBlockN + warp * kLoadTok + lane] = lane_ref.row != nullptr;
      }
      if constexpr (kRowGroups > 1) {
        // Compute-bound CTAs (>= 32 rows): version 3's mapping, kThreads / kBlockN threads per row, each
        // issuing its 16-byte pieces back to back: fewer issue slots per tile than the row-by-row loop
        // below, which cost these CTAs 2 - 7% (docs/performance.md, version 4). A warp's rows are the ones
        // its lanes looked up, so one shuffle still brings each offset.
        constexpr int kTpt = kThreads / kBlockN;
        static_assert(kThreads % kBlockN == 0 && kTpt * kLoadTok == kWarpSize, "warp w copies the rows it looked up");
        const int tok = tid / kTpt;
        const RowRef ref = shfl_ref(lane_ref, tok % kLoadTok);
        const uint32_t dst = raw_base + (stage * kBlockN + tok) * RR::kStride;
#pragma unroll
        for (int j = 0; j < (RR::kPieces + kTpt - 1) / kTpt; ++j) {
          const int ch = tid % kTpt + j * kTpt;
          if (ch < RR::kPieces) copy_row_piece<kKind, kDqk>(dst, ref, p.pages, ch);
        }
      } else {  // one row group: each warp copies its rows one by one, the offset taken by shuffle
#pragma unroll
        for (int i = 0; i < kLoadTok; ++i) {
          const int row = warp * kLoadTok + i;
          const RowRef ref = shfl_ref(lane_ref, i);
          const uint32_t dst = raw_base + (stage * kBlockN + row) * RR::kStride;
#pragma unroll
          for (int j = 0; j < kLoadIters; ++j) {
            const int ch = lane + j * kWarpSize;
            if (ch < RR::kPieces) copy_row_piece<kKind, kDqk>(dst, ref, p.pages, ch);
          }
        }
      }
    };

    RowRef ref_next = row_ref(t_begin);
    load_tile(0, ref_next);
    cp_async_commit();
    SparseId id_ahead = tile_id(t_begin + 2);  // sparse: the ids of the tile after next (-1: none)
    ref_next = n_tiles > 1 ? row_ref(t_begin + 1) : RowRef{nullptr, nullptr};

    float o[kNTilesO][4];
#pragma unroll
    for (int n = 0; n < kNTilesO; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    float m_run[2] = {-INFINITY, -INFINITY};
    float l_run[2] = {0.0f, 0.0f};

    for (int it = 0; it < n_tiles; ++it) {
      if (it + 1 < n_tiles) {
        load_tile((it + 1) % kStages, ref_next);
        if constexpr (kSparse) {
          ref_next = sparse_row_ref_of<kKind == KvKind::kDsV4>(p, id_ahead);  // no row for tiles past t_end
          id_ahead = tile_id(t_begin + it + 3);
        } else {
          ref_next = it + 2 < n_tiles ? row_ref(t_begin + it + 2) : RowRef{nullptr, nullptr};
        }
      }
      cp_async_commit();
      cp_async_wait<kStages - 1>();
      __syncthreads();
      if constexpr (kKind != KvKind::k16Bit) {
        dequant_tile<kBf16, kKind, kThreads, kDqk>(raw_smem + (it % kStages) * kBlockN * RR::kStride,
                                              smem + kSmem.tile_off, tid);
        __syncthreads();
      }
      const uint32_t k_base = kKind == KvKind::k16Bit ? raw_base + (it % kStages) * kBlockN * RR::kStride : tile_base;
      const int64_t t0 = int64_t(t_begin + it) * kBlockN;

      // ---- S = Q K^T: 16 rows x kTokW tokens, in 4 independent accumulator chains ----
      float acc[kChains][kNT][4];
#pragma unroll
      for (int c = 0; c < kChains; ++c)
#pragma unroll
        for (int n = 0; n < kNT; ++n) acc[c][n][0] = acc[c][n][1] = acc[c][n][2] = acc[c][n][3] = 0.0f;
      const uint32_t a_addr = q_base + (rg * kRowsPerGroup + lane % 16) * kSmemRowBytes + (lane / 16) * kChunk;
      if constexpr (kNT == 2) {
        // One ldmatrix.x4 per k-step: tokens 0-7 and 8-15 x k 0-7 and 8-15.
        const uint32_t b_addr = k_base + (wi * kTokW + lane % 8 + (lane / 16) * 8) * kSmemRowBytes +
                                ((lane / 8) % 2) * kChunk;
#pragma unroll
        for (int ks = 0; ks < kKSteps; ++ks) {
          uint32_t a[4], b[4];
          ldmatrix_x4(a, a_addr + ks * 32);
          ldmatrix_x4(b, b_addr + ks * 32);
          mma_16816<kBf16>(acc[ks % kChains][0], a, b[0], b[1]);
          mma_16816<kBf16>(acc[ks % kChains][1], a, b[2], b[3]);
        }
      } else {
        // One ldmatrix.x4 per two k-steps: 8 tokens x k 0-7, 8-15, 16-23, 24-31.
        const uint32_t b_addr = k_base + (wi * kTokW + lane % 8) * kSmemRowBytes + (lane / 8) * kChunk;
#pragma unroll
        for (int ks = 0; ks < kKSteps; ks += 2) {
          uint32_t a0[4], a1[4], b[4];
          ldmatrix_x4(a0, a_addr + ks * 32);
          ldmatrix_x4(a1, a_addr + (ks + 1) * 32);
          ldmatrix_x4(b, b_addr + ks * 32);
          mma_16816<kBf16>(acc[ks % kChains][0], a0, b[0], b[1]);
          mma_16816<kBf16>(acc[(ks + 1) % kChains][0], a1, b[2], b[3]);
        }
      }

      // ---- online softmax (base 2) ----
      // The maxima over the raw scores, scaled once (a positive scale keeps the order, and rounding is monotonic);
      // each weight is then one FFMA and one MUFU.EX2. fp8_e4m3's scale holds kv_scale, read from device memory
      // where no check sees its sign: its scores are scaled first.
      constexpr bool kRawMax = kKind != KvKind::kE4M3;
      float s[kNT][4];
      float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int n = 0; n < kNT; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int col = wi * kTokW + n * 8 + 2 * tig + (j & 1);
          float v = 0.0f;
#pragma unroll
          for (int c = 0; c < kChains; ++c) v += acc[c][n][j];
          if constexpr (!kRawMax) v *= scale_log2;
          bool visible = t0 + col < limit[j / 2];
          if constexpr (kSparse) visible = visible && row_valid[(it % kStages) * kBlockN + col] != 0;
          s[n][j] = visible ? v : -INFINITY;
          mx[j / 2] = fmaxf(mx[j / 2], s[n][j]);
        }
      reduce_row_maxima(mx);
      if constexpr (kRawMax) {
        mx[0] *= scale_log2;
        mx[1] *= scale_log2;
      }
      if (tig == 0) {
        my_x[gid] = mx[0];
        my_x[gid + 8] = mx[1];
      }
      named_barrier_sync(group_barrier, kGroupThreads);
      float alpha[2], m_use[2];
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        float m_new = m_run[k];
#pragma unroll
        for (int w = 0; w < kW; ++w) m_new = fmaxf(m_new, group_x[w * kRowsPerGroup + gid + 8 * k]);
        m_use[k] = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet stays at p = 0
        alpha[k] = exp2f(m_run[k] - m_use[k]);
        m_run[k] = m_new;
      }
      float psum[2] = {0.0f, 0.0f};
#pragma unroll
      for (int n = 0; n < kNT; ++n)
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          s[n][j] = exp2_ftz(kRawMax ? fmaf(s[n][j], scale_log2, -m_use[j / 2]) : s[n][j] - m_use[j / 2]);
          psum[j / 2] += s[n][j];
        }
#pragma unroll
      for (int k = 0; k < 2; ++k) l_run[k] = l_run[k] * alpha[k] + psum[k];
      // Once the running maxima settle, alpha is exactly 1 for most tiles: skip the multiplies then.
      if (!__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) {
#pragma unroll
        for (int n = 0; n < kNTilesO; ++n) {
          o[n][0] *= alpha[0];
          o[n][1] *= alpha[0];
          o[n][2] *= alpha[1];
          o[n][3] *= alpha[1];
        }
      }
      // P in the C layout of each token n-tile is half of an A fragment (a0 a1 for tokens 0-7 of a
      // k16 step, a2 a3 for tokens 8-15): every warp publishes its n-tiles and reads all four.
#pragma unroll
      for (int n = 0; n < kNT; ++n) {
        xch_p[(rg * kTokenNTiles + wi * kNT + n) * kWarpSize + lane] =
            make_uint2(pack_float2<kBf16>(s[n][0], s[n][1]), pack_float2<kBf16>(s[n][2], s[n][3]));
      }
      named_barrier_sync(group_barrier, kGroupThreads);
      uint32_t pa[2][4];
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const uint2 lo = xch_p[(rg * kTokenNTiles + 2 * kk) * kWarpSize + lane];
        const uint2 hi = xch_p[(rg * kTokenNTiles + 2 * kk + 1) * kWarpSize + lane];
        pa[kk][0] = lo.x;
        pa[kk][1] = lo.y;
        pa[kk][2] = hi.x;
        pa[kk][3] = hi.y;
      }

      // ---- O += P V over the 32 tokens, this warp's kColsW columns ----
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const uint32_t v_addr = k_base + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kSmemRowBytes +
                                (wi * kColsW + (lane / 16) * 8) * 2;
#pragma unroll
        for (int np = 0; np < kNTilesO / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, v_addr + np * 32);
          mma_16816<kBf16>(o[2 * np], pa[kk], b[0], b[1]);
          mma_16816<kBf16>(o[2 * np + 1], pa[kk], b[2], b[3]);
        }
      }
      __syncthreads();  // the stage (and the dequantised tile) is overwritten next
    }

    // ---- epilogue: total row sums over the group's warps, then out (or a partial) and lse ----
    reduce_row_sums(l_run);
    if (tig == 0) {
      my_x[gid] = l_run[0];
      my_x[gid + 8] = l_run[1];
    }
    named_barrier_sync(group_barrier, kGroupThreads);
    float l_tot[2] = {0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < 2; ++k)
#pragma unroll
      for (int w = 0; w < kW; ++w) l_tot[k] += group_x[w * kRowsPerGroup + gid + 8 * k];

    // Split or whole, and the split's slot, as for_each_piece (plan.cuh) tells the Hopper consumers.
    const bool direct = t_begin == 0 && t_end == tiles;
    const int64_t slot = partition_slot(part, r == pstart.req);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int m = row_block * kRows + rg * kRowsPerGroup + gid + 8 * k;
      if (m >= p.rows) continue;
      const bool empty = !(l_tot[k] > 0.0f);
      const float lse = empty ? -INFINITY : (m_run[k] + log2f(l_tot[k])) * kLn2;
      const int i = m / p.h_q;
      const int h = m % p.h_q;
      float inv = empty ? 0.0f : kv_scale / l_tot[k];
      if constexpr (kSparse) {
        if (direct && !empty) inv *= sink_factor(p, h, lse);  // a split row gets it in the combine
        if (p.max_logits != nullptr && wi == 0 && tig == 0) {
          // m_run is the row's largest visible logit times log2(e) (tau and kv_scale folded in): -inf for none.
          const float max_logit = m_run[k] == -INFINITY ? -INFINITY : m_run[k] * kLn2;
          if (direct) {
            p.max_logits[request_offset<kSparse>(p, r, p.max_logits_stride_b, p.max_logits_stride_s) +
                         int64_t(i) * p.max_logits_stride_s + int64_t(h) * p.max_logits_stride_h] = max_logit;
          } else {
            p.part_max[slot * p.rows + m] = max_logit;  // the combine takes the largest over the splits
          }
        }
      }
      if (direct) {
        uint8_t* orow = static_cast<uint8_t*>(p.out) + (request_offset<kSparse>(p, r, p.out_stride_b, p.out_stride_s) +
                                                        int64_t(i) * p.out_stride_s + int64_t(h) * p.out_stride_h) * 2;
#pragma unroll
        for (int n = 0; n < kNTilesO; ++n) {
          const int col = wi * kColsW + n * 8 + 2 * tig;
          *reinterpret_cast<uint32_t*>(orow + col * 2) = pack_float2<kBf16>(o[n][2 * k] * inv, o[n][2 * k + 1] * inv);
        }
        if (p.lse != nullptr && wi == 0 && tig == 0)
          p.lse[request_offset<kSparse>(p, r, p.lse_stride_b, p.lse_stride_s) + int64_t(i) * p.lse_stride_s +
                int64_t(h) * p.lse_stride_h] = lse;
      } else {
        float* orow = p.part_out + (slot * p.rows + m) * kDimV;
#pragma unroll
        for (int n = 0; n < kNTilesO; ++n) {
          const int col = wi * kColsW + n * 8 + 2 * tig;
          *reinterpret_cast<float2*>(orow + col) = make_float2(o[n][2 * k] * inv, o[n][2 * k + 1] * inv);
        }
        if (wi == 0 && tig == 0) p.part_lse[slot * p.rows + m] = lse;
      }
    }
    __syncthreads();  // xch_m and q_smem are reused by the next piece
  }
  pdl_launch_dependents();
}

}  // namespace mlakit::cuda::decode
