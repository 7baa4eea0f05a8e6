#pragma once
// The few-row decode kernels (issues 13, 9 and 8; design: docs/experiments/smxx-sparse-few-rows-study.md, sections 5
// and 8): q and out in bf16, at most 16 query rows (heads) per query token, sm_80+ (mma.sync, cp.async), for three
// formats, one body templated on a format description (few_rows::DsV4, few_rows::DsMla, few_rows::E4m3) and on sparse
// or dense decode (dense: DsMla and E4m3, one query token per request, rows found through the block table instead of
// ids):
//   DsV4:  DeepSeek V4's geometry (d_qk 512 = 448 e4m3 with UE8M0 group scales of 64 columns + 64 bf16 RoPE, V = the
//          whole row), fp8_ds_v4 cache;
//   DsMla: DeepSeek V3's (V3.2's) geometry (d_qk 576 = 512 e4m3 with fp32 group scales of 128 columns + 64 bf16 RoPE,
//          V = the first 512 columns), fp8_ds_mla cache;
//   E4m3:  V3's geometry with an fp8_e4m3 cache (576 e4m3 columns, the RoPE part too, and one fp32 scale per cache,
//          folded into the softmax scale and the output as kernel.cuh does): DsMla's body without group scales, its
//          RoPE step converting 2 e4m3 bytes per B register.
// Device code only. All read the same plan (PartitionBounds, pieces as for_each_piece walks them) and write the same
// outputs as the portable kernel (kernel.cuh): out + lse + max_logits for a whole request, part_out / part_lse /
// part_max in the partition's slot for a split one, so combine.cu and the host plan are unchanged.
//
// Shape. One CTA = one plan partition (grid (1, G)); its pieces are query tokens (sparse plan requests, or dense
// requests of one token), so the CTA's 16 mma rows are the heads h < h_q (rows h >= h_q are zero and never written).
// 8 warps. Warp g owns the 64-dimension slice g = [64 g, 64 g + 64) of the row for both products:
//   Q K^T: the partial S_g = Q[:, slice g] K[:, slice g]^T (4 k-steps x 4 token n-tiles = 16 mma per 32-token tile);
//   P V:   O[:, slice g] += P V[:, slice g]             (2 k-steps x 8 column n-tiles = 16 mma per tile).
// DsV4: slices 0-6 are exactly fp8_ds_v4's seven UE8M0 groups (64 e4m3 bytes each); slice 7 is the bf16 RoPE part.
// DsMla: slices 0-7 are the 512 e4m3 columns (fp32 group g / 2 covers slices g and g + 1), and the 64 RoPE columns,
// a ninth slice of Q K^T only, are split over the 8 warps as one m16n8k8 step each: warp g also takes RoPE columns
// [8 g, 8 g + 8) (72 columns of Q K^T per warp, 4 m16n8k8 mma per tile; study section 8.1).
//
// mma.sync.m16n8k16 fragment maps (PTX ISA "Matrix Fragments for mma.m16n8k16", 16-bit A/B, f32 C), with
// gid = lane / 4 and tig = lane % 4; each register holds two 16-bit values, the lower-indexed one in the low half:
//   A (16 x 16, row-major, M x K): a0 = A[gid][2tig, 2tig+1]     a1 = A[gid+8][2tig, 2tig+1]
//                                  a2 = A[gid][2tig+8, 2tig+9]   a3 = A[gid+8][2tig+8, 2tig+9]
//   B (16 x 8, "col", K x N):      b0 = B[2tig, 2tig+1][gid]     b1 = B[2tig+8, 2tig+9][gid]
//   C (16 x 8, f32, M x N):        c0, c1 = C[gid][2tig, 2tig+1] c2, c3 = C[gid+8][2tig, 2tig+1]
// m16n8k8 (16-bit A/B) has the first half of each: a0, a1 and b0 (k 2tig, 2tig+1), and the same C.
//
// The d-permutation (study 5.2). Q K^T sums over d, so any bijection applied to the k index of both A (Q) and B (K)
// leaves S unchanged. In k-step s (0..3) of slice g the k indices map to dimensions of the slice as
//   k = 2tig + e      (e = 0, 1) -> 16 tig + 4 s + e
//   k = 2tig + 8 + e  (e = 0, 1) -> 16 tig + 4 s + 2 + e,
// a bijection of 16 k x 4 steps onto the 64 dimensions. So thread (gid, tig) needs, for all 4 steps, exactly the 16
// consecutive dimensions [16 tig, 16 tig + 16) of its B column (token gid of the n-tile) and of its A rows (heads gid
// and gid + 8); with those 16 values as 8 16-bit pair words w[0..7] in natural order (w[i] = dims 2i, 2i + 1):
//   step s: a = {q_lo.w[2s], q_hi.w[2s], q_lo.w[2s+1], q_hi.w[2s+1]} (q_lo: head gid, q_hi: head gid + 8),
//           b0 = k.w[2s], b1 = k.w[2s+1].
// For an e4m3 slice the 16 values are one conflict-free 16-byte LDS of raw bytes and 8 exact e4m3x2 -> bf16x2 (E4m3:
// fp16x2) conversions (DsV4: then times the token's scale, see "Scales"); for V4's RoPE slice they are two 16-byte
// LDS of bf16. Q's A fragments are loaded with the same map straight from global memory, once per piece, and stay in
// registers. DsMla's RoPE step keeps the identity map: k = 2tig + e -> RoPE column 8 g + 2 tig + e, one 4-byte LDS
// of K per token and one Q word per head.
//
// Scales (study 5.4, 8.2). An e4m3 slice has one scale per token: V4's s = 2^(e - 127), V3.2's fp32 s of group g / 2.
// V4's is a power of two, so e4m3 x s is exact in bf16 (outside bf16's range ends, as on the Hopper path's producer):
// warp g multiplies the 16 values it converts for K (and stores as V) by the token's s, one bf16x2 multiply per word,
// so S and P carry no scale and P is packed to bf16 once for every warp (as fp8_e4m3's, in fp16 there: no scale per
// token either).
// V3.2's fp32 scale need not be a power of two: it stays on S and P. The partial S_g (fp32) is multiplied by it per C
// column (token), and P by the same scale before it is
// packed into A fragments for slice g's P V (the C columns of n-tile 2kk + h are the A k indices of P's k-step kk: the
// same tokens). For a power of two this equals scaling the values (what the reference and kernel.cuh do) up to
// summation order, outside overflow/underflow. For any other fp32 scale the one bf16 rounding moves from e4m3 x s (the
// portable kernel) to P x s; e4m3 values are exact in bf16, so the output error bound halves (study 8.2). DsMla
// scales its latent partial before the RoPE step accumulates into it (the RoPE part has no scale).
// DsV4 decodes its UE8M0 bytes once per tile: lane l of warp g < 7 decodes token l's byte of group g into the warp's
// row of sc_tab (bf16x2 words [32], warp-private: __syncwarp only), and each thread reads the 4 of its K tokens
// (8 n + gid) there. Decoding them where used cost LDS.U8s, decode instructions and their addresses each time (~80 of
// the ~690 instructions per warp per tile in the ncu profile of 9651a61, when S and P were scaled). DsMla's thread
// needs the scales of 8 tokens (8 n + 2 tig + j), twice per tile; its fp32 scales are stored as [group][token] in
// their small slot: both uses read them there as 4 LDS.64.
//
// fp16 operands (E4m3 only, F::kF16Mma). e4m3 values are exact in fp16 and bf16 alike, but e4m3 -> fp16 is one
// conversion per word (cvt.rn.f16x2.e4m3x2 on sm_89+) against four to bf16 (through fp16 and fp32): ~100 of the ~456
// instructions per warp per tile in the ncu profile of 4f79735. So E4m3's K, V and P are fp16, and q, given in bf16,
// is converted once per piece (q_to_f16: divided by a power of two first when its largest element would leave fp16's
// range, the partial S multiplied back). P in [0, 1] gains precision in fp16 from 2^-17 up (11 significant bits against
// 8); below, fp16's 2^-24 steps lose at most 2^-25 per token (times |V|) against the row's sum of at least 1. DsMla
// and DsV4 stay in bf16: their scales (on S and P, or on K) would take P x s or K x s out of fp16's range.
//
// V (study 5.3). Warp g (V4: g < 7) stores the 8 words it converted for K (dimensions 16 tig .. 16 tig + 15 of token
// gid of each n-tile, i.e. natural order) into its private 16-bit (E4m3: fp16) slice [32 tokens][64 dims] (row stride
// 144 B), and P V reads it with ldmatrix.x4.trans, as kernel.cuh reads its dequantised tile. V4's warp 7 reads V
// straight from the stage's bf16 RoPE area (same stride 144 B). V3.2's V is its 8 e4m3 slices: every warp reads its
// private slice.
//
// Per 32-token tile `it`, per warp:
//   (a) DsV4: the token scales of group g decoded into sc_tab[g]. K fragments from the raw stage (DsV4: times the
//       token scales; + the private V slice), Q K^T into acc[4 n-tiles]. DsV4's warp 7 (RoPE: no conversion, so
//       idle here otherwise) is the gather warp: before its RoPE mma it gathers tile it + 2, all 32 rows, with the
//       ids it read one tile earlier (id_ahead), and reads the ids of tile it + 3;
//   (b) partial S (DsMla: scaled by the token scales) stored (fp32) to spart[g]; barrier A;
//       DsMla: then every warp gathers 4 rows of tile it + 2, with ids read one tile earlier (id_ahead), and reads
//       the ids of tile it + 3;
//   (c) warp g reduces rows 2g, 2g + 1 (lane: row 2g + lane / 16, tokens 2 (lane % 16) + {0, 1}) over the 8
//       partials, masks ids that name no row, updates the running max (online softmax in base 2, fp32), stores P
//       (fp32; DsV4 and E4m3, whose S and P carry no scale: 16-bit, the mma operands' type) and alpha;
//       cp.async.wait_group for tile it + 1 (DsV4: a no-op but in the gather warp); barrier B;
//   (e) O rescaled by alpha (skipped when every alpha of the warp's rows is 1), P fragments packed (times the scales;
//       DsV4, E4m3: loaded by ldmatrix), P V.
// Two CTA barriers per tile. Invalid ids (negative, past their cache, past the piece) are zero-filled and masked out.
// Rings. DsV4: 3 raw stages (tile it in stage it % 3, scales and valid flags inside it). The gather warp writes tile
// it + 2 into stage (it + 2) % 3 = (it - 1) % 3 before barrier A of tile it: that stage's last readers were tile
// it - 1's, every warp's (a) (K, scale bytes) before barrier A and (c) (valid flags) before barrier B of tile it - 1,
// which the gather warp has passed, and the gather warp's own RoPE V reads in (e) of tile it - 1 (program order);
// no other warp reads a raw stage in (e) (nor sc_tab: P carries no scale). Up to 995a95f every V4 warp gathered 4 rows
// of tile it + 2 after barrier A and resolved its own ids: ~180 of the ~690 instructions per warp per tile, on all
// 8 warps between the barriers (ncu profile of 9651a61); one warp now does them once, in time it had spare.
// DsMla: nothing reads the raw e4m3 / RoPE bytes after (a) and (b) (the RoPE step runs in (b), before barrier A), so
// 2 raw stages suffice (tile it + 2 takes tile it's
// stage right after barrier A of tile it); the fp32 scales (read again in (e)) and the valid flags (read in (c)) live
// in a separate ring of 3 small slots. DsMla has no gather warp: every warp converts an e4m3 slice in (a), so none is
// idle before barrier A, and a gather there would need a third raw stage (+23,040 B: 130,848 B, past the 115,456 B
// a CTA may take at 2 CTAs per SM).
//
// The index maps above (Q and K fragments, the d-permutation, DsMla's RoPE step, DsV4's scales on K and DsMla's on S
// and P, the S partial and P layouts, the V ldmatrix.trans addresses) are emulated against plain matrix products by
// docs/experiments/smxx-sparse-few-rows-fragsim.py.
// Known edges: DsMla's fp32 scale near the float range, applied to S and P instead of to the values, can differ from
// the reference where it overflows or underflows (study section 6, risk 5; section 8.2). DsV4 scales K as the portable
// kernel does (bf16, exact for normal results), its edges the portable kernel's: exponent 255, and exponents 0 - 2,
// where small e4m3 codes times the scale fall below bf16's smallest subnormal (2^-133) and become 0.
// Files: this one (the body), few_rows_layout.h (constants, the format descriptions, the shared-memory layout),
// few_rows_ops.cuh (conversions and shared-memory helpers), few_rows_host.cuh (the instantiation files' launch side).
// Include only from instantiations/*_few_rows.cu: each defines its non-template __global__ around
// decode_few_rows_body<Format, kSparse>.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/ue8m0.cuh"
#include "cuda/decode/sm80/config.h"
#include "cuda/decode/sm80/few_rows_host.cuh"
#include "cuda/decode/sm80/few_rows_layout.h"
#include "cuda/decode/sm80/few_rows_ops.cuh"
#include "cuda/decode/smxx/cta_plan.cuh"
#include "cuda/decode/smxx/dequant.cuh"
#include "cuda/decode/smxx/launch.h"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode {

/// The few-row kernel body for format F (few_rows::DsV4, DsMla or E4m3); launch: grid (1, p.partitions), 256
/// threads, few_rows::Layout<F>::kSmemBytes of dynamic shared memory, only for decode with p.rows = h_q <= 16 (sparse,
/// or dense with s_q = 1) and F's cache (host_sm80.cpp, use_few_rows). Each instantiation file wraps it in its own
/// __global__.
template <class F, bool kSparse>
__device__ __forceinline__ void decode_few_rows_body(const DecodeParams& p) {
  using namespace few_rows;
  static_assert(kSparse || F::kKind != KvKind::kDsV4, "V4's geometry is sparse only");
  using L = Layout<F>;
  constexpr int kStagesOff = L::kStagesOff;
  constexpr int kFp8Off = F::kFp8Off, kRopeOff = F::kRopeOff, kScaleOff = F::kScaleOff;
  constexpr int kFp8Stride = F::kFp8Stride, kStageBytes = F::kStageBytes, kRing = F::kRawRing;
  constexpr int kFp8Slices = F::kFp8Slices;
  constexpr bool kBf16Mma = !F::kF16Mma;  // the mma operands' type: bf16, or fp16 (q, K, V and P alike)
  // fp16 operands are written for E4m3's shape only: the RoPE step split over the warps (where q's prescale is undone),
  // e4m3 RoPE bytes, no token scales (P packed once), no bf16 RoPE warp.
  static_assert(!F::kF16Mma || (F::kRopeSplit && F::kRopeE4m3 && !F::kTokenScales && !F::kScaleTable));
  // Scales on K (the table) and on S and P (per token) would apply a scale twice; the per-token scales are read from
  // the small ring's slots.
  static_assert(!(F::kScaleTable && F::kTokenScales));
  static_assert(!F::kTokenScales || (F::kSmallRing && F::kSmallSlotBytes > 0));
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t smem_base = smem_addr(smem);
  float* const spart = reinterpret_cast<float*>(smem + L::kSPartOff);  // [kWarps][kRows][kSPartStride]
  float* const psm = reinterpret_cast<float*>(smem + L::kPOff);        // [kRows][kPStride]
  float* const alpha_sm = reinterpret_cast<float*>(smem + L::kAlphaOff);
  float* const stat_m = reinterpret_cast<float*>(smem + L::kStatOff);
  float* const stat_l = stat_m + kRows;
  uint32_t* const sc_tab = reinterpret_cast<uint32_t*>(smem + L::kScTabOff);  // DsV4: bf16x2 [kWarps][kTile]
  IdRows* const id_rows = reinterpret_cast<IdRows*>(smem + L::kIdRowsOff);  // DsV4 (the gather warp's)
  uint8_t* const row_valid = smem + L::kValidOff;

  // Thread indices (warp g = slice, lane, gid = lane / 4: fragment row (A, C) / column (B), tig = lane % 4: fragment
  // column pair) are read afresh (fresh_tid) in each phase, the Q load and the epilogue: nothing derived from them is
  // kept through the tile loop.
  const int part = blockIdx.y;

  pdl_wait();  // q, the cache, the ids, the lengths and the plan may come from the previous kernels

  // fp8_e4m3's one scale per cache is folded into the scores here and into the output in the epilogue (kernel.cuh
  // does the same); fp8_ds_v4 and fp8_ds_mla have none.
  const float scale_log2 = p.softmax_scale * cache_scale<F>(p) * kLog2e;
  const PartitionBounds* bounds = partition_bounds<kSparse, kThreads>(p, part, kTileShift, blockIdx.x == 0);

  auto run_piece = [&](const Piece& pc) {
    const int32_t r = pc.req;
    const int32_t len = pc.len;
    // Columns from main_len on name the extra cache. Read here for the per-warp gather (DsMla); the gather warp
    // (DsV4) reads it in the prologue, into IdRows.
    int32_t main_len = 0;
    if constexpr (F::kGatherWarp < 0 && kSparse) main_len = request_main_len(p.lens, r);
    const int32_t t_begin = pc.t_begin;
    const int32_t n_tiles = pc.n_tiles;
    // The piece's last column + 1: at most len, so an int32 (one register fewer through the tile loop). Dense decode
    // also stops at the causal limit, the portable kernel's rule: with one query token it is len itself (unsharded:
    // len - s_q + 0 + 1; a context shard's plan writes the keys it owns below that, its local len), so the cap only
    // guards a limit the plan might one day set lower.
    int64_t hi = min(int64_t(t_begin + n_tiles) * kTile, int64_t(len));
    if constexpr (!kSparse) {
      if (p.causal) hi = min(hi, max(causal_limit(p, r, 0, len), int64_t(0)));
    }
    const int32_t kv_hi = int32_t(hi);

    // ---- Q: this thread's A-fragment words for its slice, heads gid and gid + 8 (zero past h_q) ----
    uint32_t qa[4][4];  // [k-step s][a0..a3]
    uint32_t qr[2];     // DsMla: the RoPE step's a0 (head gid), a1 (head gid + 8): RoPE columns 8 g + 2 tig, + 1
    float q_unscale = 1.0f;  // F::kF16Mma: 2^s, the factor this warp's q was divided by (warp-uniform)
    {
      // 32-bit loads, one per fragment register (16 per piece): with 16-byte loads ptxas kept the loaded words and
      // rebuilt each 4-register A operand with 4 moves before every mma, which also cost 4 registers.
      const int ft = fresh_tid();
      const int lane = ft % 32, g = ft / 32, gid = lane / 4, tig = lane % 4;
      const __nv_bfloat16* q_tok =
          static_cast<const __nv_bfloat16*>(p.q) + request_offset<kSparse>(p, r, p.q_stride_b, p.q_stride_s);
      const __nv_bfloat16* q_req = q_tok + kSlice * g + 16 * tig;
      const uint32_t* q_lo = reinterpret_cast<const uint32_t*>(q_req + int64_t(gid) * p.q_stride_h);
      const uint32_t* q_hi = reinterpret_cast<const uint32_t*>(q_req + int64_t(gid + 8) * p.q_stride_h);
      const bool has_lo = gid < p.rows, has_hi = gid + 8 < p.rows;  // rows past h_q are zero
#pragma unroll
      for (int s = 0; s < 4; ++s) {
        qa[s][0] = has_lo ? q_lo[2 * s] : 0u;
        qa[s][1] = has_hi ? q_hi[2 * s] : 0u;
        qa[s][2] = has_lo ? q_lo[2 * s + 1] : 0u;
        qa[s][3] = has_hi ? q_hi[2 * s + 1] : 0u;
      }
      if constexpr (F::kRopeSplit) {
        const __nv_bfloat16* q_rope = q_tok + ds_mla::kDimC + 8 * g + 2 * tig;
        qr[0] = has_lo ? *reinterpret_cast<const uint32_t*>(q_rope + int64_t(gid) * p.q_stride_h) : 0u;
        qr[1] = has_hi ? *reinterpret_cast<const uint32_t*>(q_rope + int64_t(gid + 8) * p.q_stride_h) : 0u;
      } else {
        qr[0] = qr[1] = 0u;
      }
      if constexpr (F::kF16Mma) q_to_f16(qa, qr, q_unscale);
    }

    // ---- gather: ids one tile before their rows (so no id load is consumed in the tile that issues it) ----
    // DsMla (every warp): this lane's index column of tile `tile` of the piece, row 4 w + l / 8 of the tile; -1 (no
    // row) past the piece's last column (kv_hi). Dense decode: the block-table entry of the row's page instead (the
    // gather adds the row's slot in it).
    auto tile_id = [&](int32_t tile) -> SparseId {
      const int g_row = fresh_tid() / 8;  // 4 w + l / 8
      const int64_t t = int64_t(t_begin + tile) * kTile + g_row;
      if constexpr (!kSparse) {
        return SparseId{tile < n_tiles && t < kv_hi ? request_pages(p, r)[t >> p.page_shift] : -1, false};
      } else {
        if (tile < n_tiles && t < kv_hi) {
          // V3.2 seldom has an extra cache: a piece wholly on the main side (always so without one; uniform across
          // the CTA) reads its ids without the per-column choice of index tensor.
          if (main_len >= kv_hi) return sparse_id<IdSet::kMainOnly>(p, r, t, main_len, len);
          return sparse_id<IdSet::kMixed>(p, r, t, main_len, len);
        }
        return SparseId{-1, false};
      }
    };
    // DsV4 (the gather warp): lane l's index column of tile `tile` of the piece (row l of the tile; as sparse_id
    // reads it, through `rows`): -1 (no row) past the piece's last column (kv_hi, at most len; so also past every
    // tile of the piece).
    auto warp_tile_id = [&](int32_t tile, const IdRows& rows) -> SparseId {
      const int64_t t = int64_t(t_begin + tile) * kTile + fresh_tid() % 32;
      if (t >= kv_hi) return SparseId{-1, false};
      const bool extra = t >= rows.main_len;
      return SparseId{extra ? p.extra_indices[rows.extra + (t - rows.main_len)] : p.indices[rows.main + t], extra};
    };
    // Tile `tile` (of the piece; dense decode needs it for the rows' slots in their pages) into raw stage `stage` and
    // (DsMla) small slot `slot`; DsV4 keeps its scales and flags in the stage.
    auto gather = [&](int stage, int slot, SparseId id, int32_t tile) {
      const uint32_t st = smem_base + kStagesOff + stage * kStageBytes;
      if constexpr (F::kGatherWarp >= 0) {
        // DsV4, the gather warp: all 32 rows, lane l holding row l's id. Its scale block (8 bytes) and valid flag
        // from lane l itself; the 36 16-byte chunks of the token blocks 4 lanes per row, so that each copy
        // instruction takes 64 contiguous bytes of 8 rows: lane l copies chunks 4 j + l % 4 (j = 0..8; chunks 0-27
        // are the e4m3 part, 28-35 the RoPE part, at byte 16 c of the block either way) of rows l / 4 + 8 k
        // (k = 0..3), their addresses shuffled from their lanes. An id that names no row zero-fills (src-size 0 reads
        // nothing; its address is the pool's).
        static_assert(kFp8Stride == 7 * 64 && ds_v4::kRopeOffset == kFp8Stride && kDimR * 2 == 2 * 64);
        const int lane = fresh_tid() % 32;
        const uint64_t policy = l2_evict_first_policy();  // each row is read once (most of them)
        const RowRef ref = sparse_row_ref_of<true>(p, id);  // row null: no row
        const bool valid = ref.row != nullptr;
        row_valid[stage * kTile + lane] = valid;
        cp_async_8(st + kScaleOff + lane * F::kScaleStride, valid ? ref.scales : p.pages,
                   valid ? ds_v4::kScaleBytes : 0);
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int row = lane / 4 + 8 * k;
          const auto row_addr = reinterpret_cast<const uint8_t*>(
              __shfl_sync(0xffffffffu, reinterpret_cast<unsigned long long>(ref.row), row));
          const bool row_ok = row_addr != nullptr;
          const int n16 = row_ok ? 16 : 0;
          const uint8_t* src = (row_ok ? row_addr : static_cast<const uint8_t*>(p.pages)) + 16 * (lane % 4);
          const uint32_t d_fp8 = st + kFp8Off + row * kFp8Stride + 16 * (lane % 4);
          const uint32_t d_rope = st + kRopeOff + row * kRopeStride + 16 * (lane % 4);
#pragma unroll
          for (int j = 0; j < 7; ++j) cp_async_16_hint(d_fp8 + 64 * j, src + 64 * j, n16, policy);
#pragma unroll
          for (int j = 0; j < 2; ++j) cp_async_16_hint(d_rope + 64 * j, src + ds_v4::kRopeOffset + 64 * j, n16, policy);
        }
      } else {
        // DsMla, every warp: lane l of warp w copies row 4 w + l / 8 of the tile, pieces l % 8 + 8 i: i = 0..3 the 32
        // e4m3 16-byte chunks, i = 4 the 8 RoPE chunks, and lanes l % 8 < 4 one 4-byte fp32 scale each into the
        // small slot's [group][token] layout.
        const int ftid = fresh_tid();
        const int g_row = ftid / 8;     // 4 w + l / 8
        const int g_piece = ftid % 8;   // l % 8
        RowRef ref{nullptr, nullptr};  // row null: zero-fill, read nothing
        if constexpr (kSparse) {
          ref = sparse_row_ref_of<false>(p, id);
        } else if (id.id >= 0) {  // dense: id is the page of token t (tile_id), t's slot in it its low page_shift bits
          const int64_t t = int64_t(t_begin + tile) * kTile + g_row;
          ref.row = p.pages + int64_t(id.id) * p.page_stride_bytes +
                    (t & ((int64_t(1) << p.page_shift) - 1)) * p.row_stride_bytes;
        }
        const bool valid = ref.row != nullptr;
        if (g_piece == 0) row_valid[slot * kTile + g_row] = valid;
        // One source base for every piece: an invalid row copies nothing (src_bytes 0) from the pool's first bytes
        // (every offset below is < 656, inside the pool's first row), so no piece needs its own select.
        const uint8_t* src = (valid ? ref.row : p.pages) + g_piece * 16;
        const int n16 = valid ? 16 : 0;
        const uint64_t policy = l2_evict_first_policy();  // each row is read once (most of them)
#pragma unroll
        for (int i = 0; i < 4; ++i) {  // the 512 e4m3 bytes: pieces g_piece + 8 i
          cp_async_16_hint(st + kFp8Off + g_row * kFp8Stride + (g_piece + 8 * i) * 16,
                           src + ds_mla::kQuantOffset + 128 * i, n16, policy);
        }
        if constexpr (F::kRopeE4m3) {  // fp8_e4m3: the 64 e4m3 RoPE bytes at 512, pieces 0 - 3
          static_assert(ds_mla::kQuantOffset == 0, "both V3 formats start with the 512 e4m3 latent bytes");
          if (g_piece < 4) {
            cp_async_16_hint(st + kRopeOff + g_row * kRopeStride + g_piece * 16, src + kDimV, n16, policy);
          }
        } else {
          cp_async_16_hint(st + kRopeOff + g_row * kRopeStride + g_piece * 16, src + ds_mla::kRopeOffset, n16, policy);
          if (g_piece < ds_mla::kNumGroups) {  // scale g_piece of the row -> [group g_piece][token g_row]
            cp_async_4(smem_base + L::kSmallOff + slot * F::kSmallSlotBytes + (g_piece * kTile + g_row) * 4,
                       src - g_piece * 12 + ds_mla::kScaleOffset, valid ? 4 : 0);  // row + 512 + 4 g_piece
          }
        }
      }
    };

    // Prologue: tiles 0 and 1 in flight (one commit group per tile, empty past the piece), ids of tile 2 read.
    SparseId id_ahead{-1, false};  // the ids of tile it + 2 (DsV4: the gather warp's, row `lane`)
    if constexpr (F::kGatherWarp >= 0) {
      // The gather warp alone. The index rows go to shared memory for the tile loop (id_rows; its last reader, the
      // previous piece's loop, is past the epilogue's barriers), visible after the barrier below.
      if (fresh_tid() / 32 == F::kGatherWarp) {
        const int32_t ml = request_main_len(p.lens, r);  // columns from ml on name the extra cache
        const IdRows rows{request_offset<true>(p, r, p.indices_stride_b, p.indices_stride_s),
                          request_offset<true>(p, r, p.extra_indices_stride_b, p.extra_indices_stride_s), ml};
        if (fresh_tid() % 32 == 0) *id_rows = rows;
#pragma unroll 1
        for (int tile = 0; tile < 2; ++tile) {
          gather(tile, tile, warp_tile_id(tile, rows), tile);
          cp_async_commit();
        }
        id_ahead = warp_tile_id(2, rows);
        cp_async_wait<1>();  // only the gather warp has cp.async groups (the other warps' waits are no-ops)
      }
    } else {
      gather(0, 0, tile_id(0), 0);
      cp_async_commit();
      gather(1, 1, tile_id(1), 1);
      cp_async_commit();
      id_ahead = tile_id(2);
      cp_async_wait<1>();
    }
    __syncthreads();  // tile 0's stage visible to every warp

    float o[8][4];  // O[heads gid / gid + 8][64 g + 8 n + 2 tig + {0, 1}] (C layout, 8 column n-tiles)
#pragma unroll
    for (int n = 0; n < 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
    // Softmax state of row 2 g + lane / 16 (identical over the 16 lanes of a half-warp); l is this lane's partial sum
    // over its 2 columns per tile, reduced over the half-warp in the epilogue.
    float m_run = -INFINITY;
    float l_run = 0.0f;

    int stage = 0;  // raw stage of tile it: it % kRing
    int sslot = 0;  // DsMla: small slot of tile it, it % 3 (DsV4: unused, the stage holds everything)
    for (int it = 0; it < n_tiles; ++it) {
      // Thread indices are read afresh in each phase (fresh_tid): offsets derived from them are then recomputed per
      // phase rather than held through the whole tile loop.
      const uint32_t st = smem_base + kStagesOff + stage * kStageBytes;
      // DsMla: the scales (slice g's group) of this thread's C columns / P's A k indices, tokens 8 n + 2 tig + j: fp32
      // group g / 2 of tokens 8 n + 2 tig, + 1, one LDS.64 of the [group][token] slot per n-tile.
      auto token_scales = [&](float (&sc)[4][2], int g, int tig) {
        const uint32_t s_base = smem_base + L::kSmallOff + sslot * F::kSmallSlotBytes + (g / 2) * kTile * 4 + 8 * tig;
#pragma unroll
        for (int n = 0; n < 4; ++n) {
          const float2 v = lds64f(s_base + 32 * n);
          sc[n][0] = v.x;
          sc[n][1] = v.y;
        }
      };
      {
        const int ft = fresh_tid();
        const int lane = ft % 32, g = ft / 32, gid = lane / 4, tig = lane % 4;
        const uint32_t vslice = smem_base + L::kVOff + g * kVSliceBytes;  // DsV4: g < 7 only
        // ---- (a) K fragments and Q K^T over slice g: acc[n] = S_g[heads][tokens 8 n .. 8 n + 7] ----
        float acc[4][4];
#pragma unroll
        for (int n = 0; n < 4; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.0f;
        // The previous tile's reads of the private V slice (ldmatrix) and of the sc_tab row (DsV4) are done before
        // they are rewritten; and V4's gather warp's reads of the raw RoPE area of stage (it - 1) % 3 (its own V).
        __syncwarp();
        if constexpr (F::kScaleTable) {
          // This tile's token scales of group g, decoded once: token `lane` into sc_tab[g][lane] as a bf16x2 word
          // (exact: a power of two), read below by the threads whose K column it is.
          if (g < kFp8Slices) {
            const float s =
                ue8m0_to_float(smem[kStagesOff + stage * kStageBytes + kScaleOff + lane * F::kScaleStride + g]);
            const __nv_bfloat162 s2 = __float2bfloat162_rn(s);
            sc_tab[g * kTile + lane] = *reinterpret_cast<const uint32_t*>(&s2);
          }
          __syncwarp();  // sc_tab[g] complete
        }
        if (F::kRopeSplit || g < kFp8Slices) {
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            const int tok = 8 * n + gid;
            uint32_t kb[8];
            const uint4 raw = lds128(st + kFp8Off + tok * kFp8Stride + kSlice * g + 16 * tig);
            if constexpr (F::kScaleTable) {  // DsV4: K (and so V) times the token's scale, exactly (dequant.cuh)
              const uint32_t s2w = sc_tab[g * kTile + tok];
              const __nv_bfloat162 s2 = *reinterpret_cast<const __nv_bfloat162*>(&s2w);
              const uint4 lo = e4m3x8_pow2_scaled_to_bf16(make_uint2(raw.x, raw.y), s2);
              const uint4 hi = e4m3x8_pow2_scaled_to_bf16(make_uint2(raw.z, raw.w), s2);
              kb[0] = lo.x, kb[1] = lo.y, kb[2] = lo.z, kb[3] = lo.w;
              kb[4] = hi.x, kb[5] = hi.y, kb[6] = hi.z, kb[7] = hi.w;
            } else {
              e4m3x16_to<kBf16Mma>(raw, kb);
            }
            // V: the same 16 values, natural order, into row tok, dims 16 tig .. 16 tig + 15 of the private slice.
            sts128(vslice + tok * kVStride + 32 * tig, make_uint4(kb[0], kb[1], kb[2], kb[3]));
            sts128(vslice + tok * kVStride + 32 * tig + 16, make_uint4(kb[4], kb[5], kb[6], kb[7]));
#pragma unroll
            for (int s = 0; s < 4; ++s) mma_16816<kBf16Mma>(acc[n], qa[s], kb[2 * s], kb[2 * s + 1]);
          }
        } else {  // V4's RoPE warp (= F::kGatherWarp): bf16 already, two 16-byte LDS per token
          if constexpr (F::kGatherWarp >= 0) {
            // Gather tile it + 2 into stage (it + 2) % 3 = (it - 1) % 3, with the ids read during tile it - 1 (or
            // the prologue), and read the ids of tile it + 3. That stage's last readers were tile it - 1's: the other
            // warps' (a) (K, scale bytes) before barrier A and (c) (row_valid) before barrier B of tile it - 1,
            // which this warp has passed, and this warp's own RoPE V ldmatrix in (e), whose results its mma used.
            // So the rows of tile it + 2 are requested here, while the other warps convert, not after barrier A.
            int next = stage + 2;
            if (next >= kRing) next -= kRing;
            gather(next, next, id_ahead, it + 2);  // id -1 past the piece: zero-fill only
            id_ahead = warp_tile_id(it + 3, *id_rows);
            cp_async_commit();
          }
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            const int tok = 8 * n + gid;
            const uint4 k0 = lds128(st + kRopeOff + tok * kRopeStride + 32 * tig);
            const uint4 k1 = lds128(st + kRopeOff + tok * kRopeStride + 32 * tig + 16);
            const uint32_t kb[8] = {k0.x, k0.y, k0.z, k0.w, k1.x, k1.y, k1.z, k1.w};
#pragma unroll
            for (int s = 0; s < 4; ++s) mma_16816<true>(acc[n], qa[s], kb[2 * s], kb[2 * s + 1]);
          }
        }

        // ---- (b) DsMla: token scales of the C columns (tokens 8 n + 2 tig + j), applied to the partial S ----
        float sc[4][2] = {{1.0f, 1.0f}, {1.0f, 1.0f}, {1.0f, 1.0f}, {1.0f, 1.0f}};  // DsV4, E4m3: none (folded)
        if constexpr (F::kTokenScales) token_scales(sc, g, tig);
        float* my = spart + g * kRows * kSPartStride;
        if constexpr (F::kRopeSplit) {
          // The latent partial scaled, then the RoPE step (unscaled) accumulated onto it: B = K[token gid of n-tile
          // n][RoPE columns 8 g + 2 tig, + 1], one conflict-free LDS.32 (row stride 144 B = 36 words: 4 gid + tig
          // + 4 g mod 32).
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            acc[n][0] *= sc[n][0];
            acc[n][1] *= sc[n][1];
            acc[n][2] *= sc[n][0];
            acc[n][3] *= sc[n][1];
            const int tok = 8 * n + gid;
            // B = K[token][RoPE columns 8 g + 2 tig, + 1]: bf16 (DsMla), or 2 e4m3 bytes converted exactly (E4m3).
            uint32_t kr;
            if constexpr (F::kRopeE4m3) {
              const uint16_t pair = lds16(st + kRopeOff + tok * kRopeStride + 8 * g + 2 * tig);
              kr = F::kF16Mma ? e4m3x2_to_half2(pair) : e4m3x2_to_bf16x2(pair);
            } else {
              kr = lds32(st + kRopeOff + tok * kRopeStride + 16 * g + 4 * tig);
            }
            mma_1688<kBf16Mma>(acc[n], qr, kr);
          }
          if constexpr (F::kF16Mma) {
            // q was divided by 2^s (q_to_f16): the whole partial (latent and RoPE) back, when s != 0 (warp-uniform).
            if (q_unscale != 1.0f) {
#pragma unroll
              for (int n = 0; n < 4; ++n)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[n][j] *= q_unscale;
            }
          }
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            const int col = 8 * n + 2 * tig;
            *reinterpret_cast<float2*>(my + gid * kSPartStride + col) = make_float2(acc[n][0], acc[n][1]);
            *reinterpret_cast<float2*>(my + (gid + 8) * kSPartStride + col) = make_float2(acc[n][2], acc[n][3]);
          }
        } else {
#pragma unroll
          for (int n = 0; n < 4; ++n) {
            const int col = 8 * n + 2 * tig;
            *reinterpret_cast<float2*>(my + gid * kSPartStride + col) =
                make_float2(acc[n][0] * sc[n][0], acc[n][1] * sc[n][1]);
            *reinterpret_cast<float2*>(my + (gid + 8) * kSPartStride + col) =
                make_float2(acc[n][2] * sc[n][0], acc[n][3] * sc[n][1]);
          }
        }
      }
      __syncthreads();  // barrier A: partials complete; every warp is past tile it - 1's P V and tile it's (a)

      if constexpr (F::kGatherWarp < 0) {
        // ---- every warp: gather tile it + 2 (ids read during tile it - 1 or the prologue), read the ids of tile
        // it + 3 ----
        int next_slot = sslot + 2;  // (it + 2) % 3: tile it - 1's scales and flags, read in its (c) and (e)
        if (next_slot >= 3) next_slot -= 3;
        gather(stage, next_slot, id_ahead, it + 2);  // (it + 2) % 2 = it % 2: tile it's raw bytes, read before barrier A
        id_ahead = tile_id(it + 3);
        cp_async_commit();
      }

      // ---- (c) row 2 g + lane / 16, columns 2 (lane % 16) + {0, 1}: S summed over the 8 slices, masked ----
      {
        const int ft = fresh_tid();
        const int lane = ft % 32, g = ft / 32;
        const int srow = 2 * g + lane / 16;
        const int scol = 2 * (lane % 16);
        float2 s2 = make_float2(0.0f, 0.0f);
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
          const float2 v = *reinterpret_cast<const float2*>(spart + (w * kRows + srow) * kSPartStride + scol);
          s2.x += v.x;
          s2.y += v.y;
        }
        // An id that names no row (negative, past its cache, past the piece) is no key: masked (its row is zeros).
        const uint8_t* valid = row_valid + (F::kSmallRing ? sslot : stage) * kTile;
        // fp8_e4m3's scale_log2 holds the cache's scale, read from device memory where validation cannot check it:
        // at 0 or below, masking the raw scores and scaling after the maximum would turn -inf into NaN or +inf. So
        // E4m3 scales each score before it masks it, as kernel.cuh does for that format; the other formats' scale
        // (softmax_scale > 0) keeps the order, and their maximum is taken over the raw scores, scaled once.
        constexpr bool kScaledMax = F::kKind == KvKind::kE4M3;
        float s0 = valid[scol] != 0 ? (kScaledMax ? s2.x * scale_log2 : s2.x) : -INFINITY;
        float s1 = valid[scol + 1] != 0 ? (kScaledMax ? s2.y * scale_log2 : s2.y) : -INFINITY;
        float mx = fmaxf(s0, s1);
#pragma unroll
        for (int x = 1; x < 16; x *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, x));
        if constexpr (!kScaledMax) mx *= scale_log2;
        const float m_new = fmaxf(m_run, mx);
        const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet stays at p = 0
        const float alpha = exp2f(m_run - m_use);
        m_run = m_new;
        if constexpr (kScaledMax) {
          s0 = exp2_ftz(s0 - m_use);
          s1 = exp2_ftz(s1 - m_use);
        } else {
          s0 = exp2_ftz(fmaf(s0, scale_log2, -m_use));
          s1 = exp2_ftz(fmaf(s1, scale_log2, -m_use));
        }
        l_run = l_run * alpha + (s0 + s1);
        if constexpr (F::kTokenScales) {
          *reinterpret_cast<float2*>(psm + srow * kPStride + scol) = make_float2(s0, s1);
        } else {  // no scale per slice: every warp's P V takes the same 16-bit P, packed once here
          const uint32_t p_word = pack_float2<kBf16Mma>(s0, s1);
          *reinterpret_cast<uint32_t*>(smem + L::kPOff + srow * kPbStride + 2 * scol) = p_word;
        }
        if (lane % 16 == 0) alpha_sm[srow] = alpha;
      }
      cp_async_wait<1>();  // tile it + 1's rows (all but tile it + 2's group; DsV4: a no-op but in the gather warp)
      __syncthreads();     // barrier B: P and alpha complete; tile it + 1's stage visible

      // ---- (e) O = alpha O + (P s) V over slice g (DsMla: s, the token scales; DsV4, E4m3: none) ----
      {
        const int ft = fresh_tid();
        const int lane = ft % 32, g = ft / 32, gid = lane / 4, tig = lane % 4;
        const float a_lo = alpha_sm[gid];
        const float a_hi = alpha_sm[gid + 8];
        // Once the running maxima settle, alpha is exactly 1 for most tiles: skip the multiplies then.
        if (!__all_sync(0xffffffffu, a_lo == 1.0f && a_hi == 1.0f)) {
#pragma unroll
          for (int n = 0; n < 8; ++n) {
            o[n][0] *= a_lo;
            o[n][1] *= a_lo;
            o[n][2] *= a_hi;
            o[n][3] *= a_hi;
          }
        }
        // P's A fragment of k-step kk (tokens 16 kk .. 16 kk + 15): a0/a1 = heads gid/gid + 8, tokens 16 kk + 2 tig
        // + {0, 1} (= C columns of n-tile 2 kk), a2/a3 the same heads, tokens 16 kk + 8 + 2 tig + {0, 1} (n-tile
        // 2 kk + 1): so DsMla's scales sc[2 kk + h][j] of (b) are the ones of these tokens. They are read again from
        // the small slot (intact until the gather of tile it + 3, after barrier A of tile it + 1) rather than kept in
        // 8 registers through (c).
        uint32_t pa[2][4];
        if constexpr (F::kTokenScales) {
          float sc[4][2];
          token_scales(sc, g, tig);
#pragma unroll
          for (int kk = 0; kk < 2; ++kk)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int n = 2 * kk + h;
              const int col = 8 * n + 2 * tig;
              const float2 plo = *reinterpret_cast<const float2*>(psm + gid * kPStride + col);
              const float2 phi = *reinterpret_cast<const float2*>(psm + (gid + 8) * kPStride + col);
              pa[kk][2 * h] = pack_float2<true>(plo.x * sc[n][0], plo.y * sc[n][1]);
              pa[kk][2 * h + 1] = pack_float2<true>(phi.x * sc[n][0], phi.y * sc[n][1]);
            }
        } else {
          // 16-bit P, [head][token] at kPbStride, as m16n8k16 A fragments by ldmatrix.x4: matrix q = lane / 8 is heads
          // 8 (q % 2) .. + 7 x tokens 16 kk + 8 (q / 2) .. + 7, i.e. a0 .. a3 in order. Was 8 LDS.64 and 8 packs per
          // thread per tile, the MIO queue's and the packs' stalls in the profile of 4f79735.
          const uint32_t p_addr =
              smem_base + L::kPOff + (lane % 8 + ((lane / 8) % 2) * 8) * kPbStride + (lane / 16) * 16;
#pragma unroll
          for (int kk = 0; kk < 2; ++kk) ldmatrix_x4(pa[kk], p_addr + 32 * kk);
        }
        // V B fragments through ldmatrix.x4.trans of the row-major [token][64 dims] slice (stride 144 B): matrix
        // q = lane / 8 is tokens 16 kk + 8 (q % 2) .. + 7 x dims 16 np + 8 (q / 2) .. + 7, so b[0], b[1] are the B
        // fragment (tokens 16 kk .. + 15) of column n-tile 2 np and b[2], b[3] that of n-tile 2 np + 1.
        const uint32_t v_base = !F::kRopeSplit && g == kFp8Slices ? st + kRopeOff
                                                                   : smem_base + L::kVOff + g * kVSliceBytes;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const uint32_t v_addr = v_base + (16 * kk + lane % 8 + ((lane / 8) % 2) * 8) * kVStride + (lane / 16) * 16;
#pragma unroll
          for (int np = 0; np < 4; ++np) {
            uint32_t b[4];
            ldmatrix_x4_trans(b, v_addr + np * 32);
            mma_16816<kBf16Mma>(o[2 * np], pa[kk], b[0], b[1]);
            mma_16816<kBf16Mma>(o[2 * np + 1], pa[kk], b[2], b[3]);
          }
        }
      }
      stage = stage + 1 == kRing ? 0 : stage + 1;
      if constexpr (F::kSmallRing) sslot = sslot + 1 == 3 ? 0 : sslot + 1;
    }
    cp_async_wait_all();  // only zero-fill groups (tiles past the piece) can be left; the next piece's prologue
                          // reuses the stages

    // ---- epilogue: row statistics to every warp, then out (or a partial) and lse, as kernel.cuh writes them ----
    const int ft = fresh_tid();
    const int lane = ft % 32, g = ft / 32, gid = lane / 4, tig = lane % 4;
#pragma unroll
    for (int x = 1; x < 16; x *= 2) l_run += __shfl_xor_sync(0xffffffffu, l_run, x);
    const int srow = 2 * g + lane / 16;  // the row whose statistics this lane holds
    if (lane % 16 == 0) {
      stat_m[srow] = m_run;
      stat_l[srow] = l_run;
    }
    __syncthreads();
    // Split or whole, and the split's slot, as for_each_piece gives them (pc.slot), derived again here from the
    // piece's tiles and the bounds in shared memory, so that nothing of the epilogue is live through the tile loop.
    const bool direct = t_begin == 0 && n_tiles == request_tiles(len, kTileShift);
    const int64_t slot = partition_slot(part, r == bounds->start.req);
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int m = gid + 8 * k;  // the head (plan requests are single query tokens here: row m = head m)
      if (m >= p.rows) continue;
      const float m_row = stat_m[m];
      const float l_tot = stat_l[m];
      const bool empty = !(l_tot > 0.0f);
      const float lse = empty ? -INFINITY : (m_row + log2f(l_tot)) * kLn2;
      const int h = m;
      float inv = empty ? 0.0f : cache_scale<F>(p) / l_tot;  // E4m3: V's scale, as kernel.cuh's output
      if (direct && !empty) inv *= sink_factor(p, h, lse);  // a split row gets it in the combine
      if (p.max_logits != nullptr && g == 0 && tig == 0) {
        // m_row is the row's largest visible logit times log2(e) (tau, and fp8_e4m3's scale, folded in): -inf for
        // none.
        const float max_logit = m_row == -INFINITY ? -INFINITY : m_row * kLn2;
        if (direct) {
          p.max_logits[request_offset<kSparse>(p, r, p.max_logits_stride_b, p.max_logits_stride_s) +
                       int64_t(h) * p.max_logits_stride_h] = max_logit;
        } else {
          p.part_max[slot * p.rows + m] = max_logit;  // the combine takes the largest over the splits
        }
      }
      if (direct) {
        uint8_t* orow = static_cast<uint8_t*>(p.out) +
                        (request_offset<kSparse>(p, r, p.out_stride_b, p.out_stride_s) + int64_t(h) * p.out_stride_h) * 2;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const int col = kSlice * g + 8 * n + 2 * tig;
          *reinterpret_cast<uint32_t*>(orow + col * 2) = pack_float2<true>(o[n][2 * k] * inv, o[n][2 * k + 1] * inv);
        }
        if (p.lse != nullptr && g == 0 && tig == 0)
          p.lse[request_offset<kSparse>(p, r, p.lse_stride_b, p.lse_stride_s) + int64_t(h) * p.lse_stride_h] = lse;
      } else {
        float* orow = p.part_out + (slot * p.rows + m) * kDimV;
#pragma unroll
        for (int n = 0; n < 8; ++n) {
          const int col = kSlice * g + 8 * n + 2 * tig;
          *reinterpret_cast<float2*>(orow + col) = make_float2(o[n][2 * k] * inv, o[n][2 * k + 1] * inv);
        }
        if (g == 0 && tig == 0) p.part_lse[slot * p.rows + m] = lse;
      }
    }
    __syncthreads();  // stat_m/l, the stages and row_valid are reused by the next piece
  };
  // The pieces of the partition, exactly as for_each_piece (plan.cuh) walks them, but with the bounds read again from
  // shared memory for every piece: for_each_piece's copies stay live through the whole tile loop, which cost 4 spilled
  // registers under the 128-register bound.
  for (int32_t r = bounds->start.req;; ++r) {
    const PartitionStart pstart = bounds->start, pend = bounds->end;
    if (!(r < p.batch && (r < pend.req || (r == pend.req && pend.tile > 0)))) break;
    const int32_t len = request_len<kSparse>(p.lens, r);
    const int32_t tiles = request_tiles(len, kTileShift);
    const int32_t t_begin = r == pstart.req ? pstart.tile : 0;
    const int32_t t_end = r == pend.req ? pend.tile : tiles;
    const int32_t slot = t_begin == 0 && t_end == tiles ? -1 : int32_t(partition_slot(part, r == pstart.req));
    if (t_end - t_begin > 0) run_piece(Piece{r, len, t_begin, t_end - t_begin, slot});
  }
  pdl_launch_dependents();
}

}  // namespace mlakit::cuda::decode
