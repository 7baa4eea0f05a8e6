#pragma once
// The Hopper ragged prefill kernel (issue 10, docs/spec.md section 3; sm_90a only). One item = 128 query rows of
// one request and one head (the slot mapping of smxx/block.cuh); a CTA takes one item, or several in the persistent
// form below, with three warpgroups:
//   0, 1  consumers: 64 rows each, every key tile: S = Q K^T (wgmma, Q and K from shared memory), the online
//         softmax in fp32, O += P V (P from registers, V from shared memory), the previous tile's P V running
//         under each softmax; no state is shared between them;
//   2     producer: the item's Q by TMA, then its K and V tiles of 128 keys into a ring of kStages stages: TMA boxes for
//         whole tiles, cp.async rows for a request's partial last tile (rows past its keys zero-filled, so that
//         P = 0 never meets a NaN of memory that is not the request's).
// The two consumers overlap each other (one's softmax under the other's products); the K (or V) part of a stage is
// refilled once both released it: K right after their Q K^T of the tile, V after their P V.
//
// Two launch forms (prefill_sm90.cpp picks one): one CTA per (slot, head) item, or, where requests are short,
// persistent: one CTA per SM walking every gridDim.x-th item in the launch order of the first form (slot fastest, so
// that the CTAs running together still share a head's keys in L2). A persistent CTA initialises its barriers once,
// passes an item with no rows after its producer's block search, with no launch or barrier set-up of its own (in the first form
// a CTA was launched for each: 8,192 of 64 x 512's 40,960), and runs its K/V ring on across items: the next item's
// first tiles load during this one's last.
// In the persistent form only the producer searches for blocks and hands each to the consumers with its Q (ItemInfo),
// and Q is handed back (q_empty) as soon as the consumers' last Q K^T of a block is done, so the next block's Q loads
// under this block's last softmax, P V and epilogue (which stages out through shared memory of its own). With one CTA
// per block the consumers find their block themselves while the producer does, and never hand Q back.

#include <cuda.h>

#include <cstdint>

#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/prefill/smxx/block.cuh"
#include "cuda/prefill/smxx/softmax.cuh"

namespace mlakit::cuda::prefill::sm90 {

inline constexpr int kRowsPerConsumer = 64;  // the wgmma M
inline constexpr int kConsumers = 2;
inline constexpr int kBlockM = kRowsPerConsumer * kConsumers;
inline constexpr int kBlockN = 128;  // keys per tile: Q K^T as m64n128k16 (flash-attention 3's tile for d 192 / 128)
inline constexpr int kStages = 2;
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kThreads = (kConsumers + 1) * kWarpgroupThreads;
inline constexpr int kProducer = kConsumers;  // warpgroup index
inline constexpr int kChunkValues = 64;       // 16-bit values per 128-byte swizzled row
inline constexpr int kTileChunkBytes = kBlockN * 128;  // a 64-column chunk of a K or V tile (16 KB)
inline constexpr int kConsumerRowBytes = kRowsPerConsumer * 128;  // one consumer's 64 rows of a Q chunk (8 KB)
inline constexpr int kBoxRows = 64;  // rows of a TMA box (the host's tensor maps): a K or V chunk takes kBlockN / 64
inline constexpr int kQChunkBytes = kBlockM * 128;     // a 64-column chunk of the Q block (16 KB)
inline constexpr int kReleaseArrivals = kConsumers * kWarpgroupThreads / 32;  // one per consumer warp
/// Registers per thread after setmaxnreg (the launch allows 168 at 384 threads): the consumers hold O (64), S (64)
/// and P (32) and spilled at 168, the producer spilled at 40 (ptxas -v: none at 56 / 224). The consumers take
/// what the producer gives back, no more (setmaxnreg.inc draws on the CTA's released registers).
/// The persistent form's producer walks items (their blocks' bounds across the walk) and hands each block to the
/// consumers (ItemInfo); it spilled at 56, 72 and 80 (ptxas -v): 88 / 208 there.
inline constexpr int kLaunchRegs = 65536 / kThreads / 8 * 8;
template <bool kPersistent>
inline constexpr int kConsumerRegs = kPersistent ? 208 : 224;
template <bool kPersistent>
inline constexpr int kProducerRegs = kPersistent ? 88 : 56;
static_assert(kConsumers * (kConsumerRegs<false> - kLaunchRegs) <= kLaunchRegs - kProducerRegs<false>);
static_assert(kConsumers * (kConsumerRegs<true> - kLaunchRegs) <= kLaunchRegs - kProducerRegs<true>);

inline constexpr int kOperands = 2;  // K and V: each part of a stage has its own full and empty barrier
enum Operand : int { kK = 0, kV = 1 };

template <int kDQK, int kDV>
struct Layout {
  static constexpr int kQChunks = kDQK / kChunkValues;
  static constexpr int kVChunks = kDV / kChunkValues;
  static constexpr int q = 0;
  static constexpr int k_stage = kQChunks * kTileChunkBytes;
  static constexpr int stage_bytes = k_stage + kVChunks * kTileChunkBytes;  // K chunks, then V chunks
  static constexpr int stage0 = kQChunks * kQChunkBytes;
  // K and V of a stage have their own barriers (kOperands: K, then V): K is given back as soon as its Q K^T is done,
  // a whole softmax and P V before V, so that the next tile's K loads meanwhile (two stages leave no other slack).
  static constexpr int full = stage0 + kStages * stage_bytes;  // uint64 [kOperands][kStages]
  static constexpr int empty = full + kOperands * kStages * 8;  // uint64 [kOperands][kStages]
  static constexpr int q_full = empty + kOperands * kStages * 8;  // uint64
  static constexpr int q_empty = q_full + 8;  // uint64: Q handed back (one arrival per consumer thread)
  static constexpr int item = q_empty + 8;     // ItemInfo: the block whose Q is in Q's memory
  // The persistent form's epilogue staging, one half-row block (64 rows x 128 bytes) per consumer, apart from Q so that
  // Q can be handed back right after the block's last Q K^T (227 KB allow these 16 KB beside the 208 KB of Q and the
  // ring).
  static constexpr int out_stage = (item + 64 + 1023) / 1024 * 1024;
  static constexpr int total = out_stage + kConsumers * kConsumerRowBytes;
  // Dynamic shared memory per form, with slack to align the base to 1024 bytes: the form with one CTA per block uses
  // neither ItemInfo nor the own staging and asks for no more than before them (at d 128 / 128 those 17 KB would
  // cross the 164 KB carveout step and take 32 KB of L1).
  template <bool kPersistent>
  static constexpr int alloc = (kPersistent ? total : item) + 1024;
  static_assert(kDQK % kChunkValues == 0 && kDV == 128, "d_v = 128: the P V wgmma is m64n128k16");
  static_assert(kQChunks >= 2, "the one-CTA epilogue stages a row of out (256 bytes) through two Q chunks");
  static_assert(item % 8 == 0);
  static_assert(alloc<true> <= 227 * 1024);
};

/// Descriptor of a K-major operand (Q, K): 64-value rows, 8-row atoms of 1024 bytes.
__device__ __forceinline__ uint64_t k_major(uint32_t addr) { return wgmma_desc(addr, 16, 1024); }
/// V as an MN-major B operand: token rows of 64 values per chunk, chunks kTileChunkBytes apart.
__device__ __forceinline__ uint64_t v_operand(uint32_t addr) { return wgmma_desc(addr, kTileChunkBytes, 1024); }

/// A partial tile, row by row with cp.async (all producer threads): `chunks` 64-column chunks of rows
/// [0, kBlockN) from `src` (row stride in elements), rows from `valid` on zero-filled.
__device__ __forceinline__ void load_rows(uint32_t dst, const uint8_t* src, int64_t stride, int chunks, int valid,
                                          int ptid) {
  for (int idx = ptid; idx < kBlockN * chunks * 8; idx += kWarpgroupThreads) {
    const int row = idx / (chunks * 8), rest = idx % (chunks * 8), c = rest / 8, piece = rest % 8;
    const bool ok = row < valid;
    const uint8_t* s = ok ? src + (int64_t(row) * stride + c * kChunkValues + piece * 8) * 2 : src;
    cp_async_16(dst + c * kTileChunkBytes + swizzle128(uint32_t(row), uint32_t(piece)), s, ok ? 16 : 0);
  }
}

/// The persistent form's block whose Q the producer loaded, handed to the consumers with Q: written before the
/// producer's q_full arrival, copied by the consumers right after their q_full wait, rewritten only after every one of
/// them handed Q back (q_empty). So only the producer searches for blocks; the consumers learn theirs when their Q
/// lands. n_tiles < 0: no more blocks.
struct ItemInfo {
  Block b;
  int32_t h;
  int32_t n_tiles;
};
static_assert(sizeof(ItemInfo) <= 64 && alignof(ItemInfo) <= 8);

/// The producer's tile rule, which the consumers repeat to know which tiles need a proxy fence.
__device__ __forceinline__ bool tile_by_rows(const Block& b, int32_t t) { return int64_t(t + 1) * kBlockN > b.lk; }

/// The producer's work for one block: Q, then its key tiles into the ring from position g0 (the tiles this CTA loaded
/// before: 0 but in the persistent form). `q_round`: the blocks whose Q this CTA loaded before; from the second on, Q
/// waits for the consumers to hand the previous one back, so the block's first K tile is issued before it.
template <int kDQK, int kDV>
__device__ __forceinline__ void run_producer(const PrefillParams& p, const CUtensorMap* q_map, const CUtensorMap* k_map,
                                             const CUtensorMap* v_map, const Block& b, int h, int32_t n_tiles,
                                             uint32_t base, uint32_t g0, uint32_t q_round, ItemInfo* info) {
  using L = Layout<kDQK, kDV>;
  const int ptid = int(threadIdx.x) - kProducer * kWarpgroupThreads;
  const auto load_q = [&]() {
    if (ptid != 0) return;
    if (q_round > 0) mbar_wait(base + L::q_empty, (q_round - 1) & 1);
    if (info != nullptr) *info = ItemInfo{b, h, n_tiles};  // published by the arrival below (release)
    mbar_arrive_expect_tx(base + L::q_full, uint32_t(L::kQChunks * kQChunkBytes));
    for (int c = 0; c < L::kQChunks; ++c) {
      for (int half = 0; half < kConsumers; ++half) {
        tma_load_3d(base + L::q + c * kQChunkBytes + half * kConsumerRowBytes, q_map, base + L::q_full, c * kChunkValues,
                    h, int32_t(b.q0 + b.m0 + half * kRowsPerConsumer));
      }
    }
  };
  if (q_round == 0 || n_tiles == 0) load_q();
  for (int32_t t = 0; t < n_tiles; ++t) {
    const uint32_t g = g0 + uint32_t(t);  // ring position
    const int st = int(g % kStages);
    const uint32_t stage = base + L::stage0 + st * L::stage_bytes;
    const int64_t key = b.k0 + int64_t(t) * kBlockN;
    const bool by_rows = tile_by_rows(b, t);
    // A stage's earlier block may have ended in a partial tile written by cp.async (the generic proxy): those writes are
    // ordered before this block's TMA (the async proxy) rewrites the stage.
    const bool after_rows = g0 > 0 && t < kStages;
#pragma unroll
    for (int w = kK; w <= kV; ++w) {  // K, then V, each once its part of the stage is free
      const uint32_t full = base + L::full + (w * kStages + st) * 8;
      mbar_wait(base + L::empty + (w * kStages + st) * 8, ((g / kStages) & 1) ^ 1);  // a fresh barrier counts as freed once
      const uint32_t dst = stage + (w == kK ? 0 : L::k_stage);
      const int chunks = w == kK ? L::kQChunks : L::kVChunks;
      if (by_rows) {
        const int valid = int(b.lk - int64_t(t) * kBlockN);
        const uint8_t* src = w == kK ? p.k + (key * p.k_stride_t + int64_t(h) * p.k_stride_h) * 2
                                     : p.v + (key * p.v_stride_t + int64_t(h) * p.v_stride_h) * 2;
        load_rows(dst, src, w == kK ? p.k_stride_t : p.v_stride_t, chunks, valid, ptid);
        mbar_arrive_on_cp_async(full);
      } else if (ptid == 0) {
        if (after_rows) fence_proxy_async();
        mbar_arrive_expect_tx(full, uint32_t(chunks * kTileChunkBytes));
        for (int c = 0; c < chunks; ++c) {
          for (int r = 0; r < kBlockN; r += kBoxRows) {
            tma_load_3d(dst + c * kTileChunkBytes + r * 128, w == kK ? k_map : v_map, full, c * kChunkValues, h,
                        int32_t(key + r));
          }
        }
      } else {
        mbar_arrive(full);
      }
      if (t == 0 && w == kK && q_round > 0) load_q();
    }
  }
}

/// After this CTA's `q_rounds` blocks: tells the consumers there are no more (n_tiles = -1), as a q_full phase of its
/// own without a copy.
template <int kDQK, int kDV>
__device__ __forceinline__ void end_items(uint32_t base, uint32_t q_rounds, ItemInfo* info) {
  using L = Layout<kDQK, kDV>;
  if (threadIdx.x != kProducer * kWarpgroupThreads) return;
  if (q_rounds > 0) mbar_wait(base + L::q_empty, (q_rounds - 1) & 1);
  info->n_tiles = -1;
  mbar_arrive(base + L::q_full);
}

/// Whether every row of out starts on 16 bytes (the pointer and both strides), so that the epilogue may write it in
/// 16-byte pieces; the same for the whole grid.
__device__ __forceinline__ bool out_rows_aligned(const PrefillParams& p) {
  return ((reinterpret_cast<uintptr_t>(p.out) | uint64_t(p.out_stride_t * 2) | uint64_t(p.out_stride_h * 2)) & 15) == 0;
}

/// The epilogue of one consumer through shared memory: its 64 x kDV block of out, scaled by 1 / l, goes as 16-bit
/// values into staging rows of 128 bytes, 16-byte pieces swizzled by row so that the accumulator layout's 4-byte
/// stores fall on 32 distinct banks; each warp then copies its own 16 rows out in 16-byte pieces, 128 contiguous
/// bytes per row at a time (whole lines where out's rows start on 128 bytes), where the direct stores wrote each row as 32 half-used sectors (ncu on 4 x 4096: the epilogue and its drain
/// were ~10% of the consumers' samples). kPasses = 1: the whole row at once, through this consumer's rows of the first
/// two Q chunks (`stage`, chunk after chunk kQChunkBytes apart; free once its last Q K^T is done); kPasses = 2: half
/// the columns at a time through one 64 x 128-byte block of its own (`stage`), so that Q can go back before the
/// epilogue. A warp reads back only rows it staged, so __syncwarp orders each write, read and the next pass's write.
/// Rows past the block's queries are staged but not written.
template <bool kBf16, int kDV, int kPasses>
__device__ __forceinline__ void store_block_via_smem(const PrefillParams& p, const float (&o)[kDV / 2], const float (&l)[2],
                                                     uint32_t stage, int me, int rows, int64_t token0, int h, int warp,
                                                     int lane) {
  static_assert(kDV == 128, "a row is 16 pieces of 16 bytes: two 128-byte staging rows");
  static_assert(kPasses == 1 || kPasses == 2);
  constexpr int kPieces = kDV * 2 / 16 / kPasses;  // 16-byte pieces per row and pass
  constexpr int kRowsPerStep = 32 / kPieces;        // rows a warp copies out at once
  // Piece j of local row r (of this pass): 128-byte row j / 8 of the staging, row r, 16-byte slot (j % 8) ^ (r % 8).
  const auto piece_addr = [&](uint32_t r, uint32_t j) {  // unsigned: % and / are masks and shifts
    return stage + (j / 8) * kQChunkBytes + r * 128 + ((j % 8) ^ (r % 8)) * 16;
  };
  const int gid = lane / 4, tig = lane % 4;
  float inv[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) inv[e] = row_out_factor(l[e]);
  // kRowsPerStep rows per step it: lanes kPieces k .. kPieces (k + 1) - 1 take the pieces of row
  // warp * 16 + kRowsPerStep * it + k.
  const int j = lane % kPieces;
  const int r0 = warp * 16 + lane / kPieces;
  const int64_t row_step = kRowsPerStep * p.out_stride_t * 2;  // bytes from one of a lane's rows to its next
  uint8_t* const out0 = p.out + ((token0 + me * kRowsPerConsumer + r0) * p.out_stride_t + int64_t(h) * p.out_stride_h) * 2 +
                        j * 16;
#pragma unroll
  for (int pass = 0; pass < kPasses; ++pass) {
    // The warp's reads of these staging rows (the last pass's, or the last block's in the persistent form) done;
    // Q's rows (kPasses = 1) were read by wgmma only.
    if (kPasses == 2 || pass > 0) __syncwarp();
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const int r = warp * 16 + gid + 8 * e;
#pragma unroll
      for (int q = 0; q < kPieces; ++q) {
        const int nt = pass * kPieces + q;
        const uint32_t v = pack_float2<kBf16>(o[4 * nt + 2 * e] * inv[e], o[4 * nt + 2 * e + 1] * inv[e]);
        asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(piece_addr(uint32_t(r), uint32_t(q)) + 4 * tig), "r"(v) : "memory");
      }
    }
    __syncwarp();  // the warp's 16 rows of this pass are staged
    // Every piece read before the first store: with each read feeding its store, every store waited for its read.
    uint4 v[16 / kRowsPerStep];
#pragma unroll
    for (int it = 0; it < 16 / kRowsPerStep; ++it) {
      asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                   : "=r"(v[it].x), "=r"(v[it].y), "=r"(v[it].z), "=r"(v[it].w)
                   : "r"(piece_addr(uint32_t(r0 + kRowsPerStep * it), uint32_t(j)))
                   : "memory");
    }
    uint8_t* out = out0 + pass * kPieces * 16;
#pragma unroll
    for (int it = 0; it < 16 / kRowsPerStep; ++it, out += row_step) {
      if (me * kRowsPerConsumer + r0 + kRowsPerStep * it < rows) *reinterpret_cast<uint4*>(out) = v[it];
    }
  }
}

/// One consumer's work for one block, once its Q has landed: its 64 rows over the block's key tiles, taken from ring
/// position g0. kPersistent: Q's memory is given back after the block's last Q K^T (the next block, or the end, goes
/// there) and the epilogue stages through memory of its own; else Q's memory is never given back (the CTA has one
/// block) and the epilogue stages through it, in one pass instead of two (1.5% of 1 x 4096 when it did not).
template <bool kBf16, int kDQK, int kDV, bool kPersistent>
__device__ __forceinline__ void run_consumer(const PrefillParams& p, const Block& b, int h, int32_t n_tiles, int rows,
                                             uint32_t base, int me, uint32_t g0) {
  using L = Layout<kDQK, kDV>;
  const int ctid = int(threadIdx.x) - me * kWarpgroupThreads;
  const int warp = ctid / 32, lane = ctid % 32, gid = lane / 4, tig = lane % 4;
  const int rloc[2] = {me * kRowsPerConsumer + warp * 16 + gid, me * kRowsPerConsumer + warp * 16 + gid + 8};
  int64_t limit[2];  // visible keys of this thread's rows: [0, limit)
#pragma unroll
  for (int e = 0; e < 2; ++e) limit[e] = b.limit(p.causal, b.m0 + rloc[e]);
  // Tiles below this many keys are visible to every row of the block (its first row sees the fewest keys): their
  // softmax skips the mask, which the consumers' instruction issue measurably paid for on every tile.
  const int64_t unmasked_end = b.limit(p.causal, b.m0) / kBlockN * kBlockN;
  const uint32_t q_rows = base + L::q + me * kConsumerRowBytes;  // this consumer's 64 rows of every Q chunk

  float o[kDV / 2];
#pragma unroll
  for (int i = 0; i < kDV / 2; ++i) o[i] = 0.0f;
  float s[kBlockN / 2];
  uint32_t pa[kBlockN / 16][4];  // P of the previous tile, multiplied into V while this tile's softmax runs
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  float alpha[2] = {1.0f, 1.0f};  // rescale of O that the previous tile's softmax asked for
  const auto stage_of = [&](int32_t t) { return base + L::stage0 + ((g0 + uint32_t(t)) % kStages) * L::stage_bytes; };

  const auto wait_full = [&](int w, int32_t t) {  // K or V of tile t has landed
    const uint32_t g = g0 + uint32_t(t);
    mbar_wait(base + L::full + (w * kStages + g % kStages) * 8, (g / kStages) & 1);
    if (tile_by_rows(b, t)) fence_proxy_async();  // written through the generic proxy, read by wgmma
  };
  const auto issue_qk = [&](int32_t t) {  // S = Q K^T of tile t (64 x kBlockN), once its K has landed
    wait_full(kK, t);
    const uint32_t stage = stage_of(t);
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < L::kQChunks; ++c) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        wgmma_m64n128k16_ss<kBf16>(s, k_major(q_rows + c * kQChunkBytes + kk * 32),
                                   k_major(stage + c * kTileChunkBytes + kk * 32), c + kk > 0 ? 1 : 0);
      }
    }
    wgmma_commit();
  };
  const auto issue_pv = [&](int32_t t) {  // O = O * alpha + P V of tile t, P from pa
    // O *= alpha, skipped when no row maximum of the warp moved (alpha is exactly 1 then), as after the first
    // tiles it mostly does not.
    if (!__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) {
#pragma unroll
      for (int i = 0; i < kDV / 2; ++i) o[i] *= alpha[(i >> 1) & 1];
    }
    wait_full(kV, t);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      wgmma_m64n128k16_rs_tb<kBf16>(o, pa[kk], v_operand(stage_of(t) + L::k_stage + kk * 16 * 128));
    }
    wgmma_commit();
  };
  // S of tile t -> P (in s), the running max and sum, alpha for O. The maxima are taken over the raw scores and
  // scaled once (scale_log2 > 0 keeps the order, and rounding is monotonic, so m is what scaling every score would
  // give); each weight is then one FFMA and one MUFU.EX2 (flash-attention 3's way): 4 instructions fewer per score.
  const auto softmax = [&](int32_t t) {
    fence_registers(s);
    const int64_t t0 = int64_t(t) * kBlockN;
    float mx[2] = {-INFINITY, -INFINITY};
    if (t0 + kBlockN <= unmasked_end) {  // the same for the whole CTA
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
    } else {
      const int32_t room[2] = {int32_t(min(limit[0] - t0, int64_t(kBlockN))), int32_t(min(limit[1] - t0, int64_t(kBlockN)))};
#pragma unroll
      for (int i = 0; i < kBlockN / 2; ++i) {
        const int col = 8 * (i / 4) + 2 * tig + (i & 1);
        s[i] = col < room[(i >> 1) & 1] ? s[i] : -INFINITY;  // also drops a masked key's NaN
        mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
      }
    }
    mx[0] *= p.scale_log2;
    mx[1] *= p.scale_log2;
    float m_use[2];
    advance_rows(mx, m, l, alpha, m_use);
#pragma unroll
    for (int i = 0; i < kBlockN / 2; ++i) {
      s[i] = exp2_ftz(fmaf(s[i], p.scale_log2, -m_use[(i >> 1) & 1]));
      l[(i >> 1) & 1] += s[i];
    }
  };
  const auto pack = [&]() {
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = pack_float2<kBf16>(s[8 * kk + 2 * r], s[8 * kk + 2 * r + 1]);
    }
  };
  const auto release = [&](int w, int32_t t) {  // K or V of tile t goes back to the producer
    if (lane == 0) mbar_arrive(base + L::empty + (w * kStages + (g0 + uint32_t(t)) % kStages) * 8);
  };
  // Q's memory back to the producer once this thread's last Q K^T has completed (wgmma_wait): only wgmma reads Q, so
  // the next block's Q loads under this block's last softmax, P V and epilogue.
  // Every thread arrives, not one per warp: each read the block's ItemInfo, which the producer rewrites next, and
  // its own arrival is what orders that read before the rewrite (racecheck flagged the other lanes' reads).
  const auto release_q = [&]() {
    if (kPersistent) mbar_arrive(base + L::q_empty);
  };

  // Per tile t >= 1: S(t) = Q K^T is issued first, then the previous tile's P V; the softmax of tile t waits for
  // S alone (the older group) and runs while that P V finishes (flash-attention 3's intra-warpgroup overlap).
  if (n_tiles == 0) release_q();
  if (n_tiles > 0) {
    issue_qk(0);
    wgmma_wait<0>();
    release(kK, 0);
    if (n_tiles == 1) release_q();
    softmax(0);
    pack();
  }
  for (int32_t t = 1; t < n_tiles; ++t) {
    issue_qk(t);
    issue_pv(t - 1);
    wgmma_wait<1>();  // S(t): committed before the P V, so it completes first
    release(kK, t);   // K(t) is read by Q K^T only
    if (t == n_tiles - 1) release_q();
    softmax(t);
    wgmma_wait<0>();
    fence_registers(o);
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) fence_registers(pa[kk]);
    release(kV, t - 1);
    pack();
  }
  if (n_tiles > 0) {
    issue_pv(n_tiles - 1);
    wgmma_wait<0>();
    fence_registers(o);
    release(kV, n_tiles - 1);
  }

  // ---- epilogue: out and lse of this thread's rows ----
  reduce_row_sums(l);
  if (out_rows_aligned(p)) {
    if constexpr (kPersistent) {
      store_block_via_smem<kBf16, kDV, 2>(p, o, l, base + L::out_stage + me * kConsumerRowBytes, me, rows, b.q0 + b.m0,
                                          h, warp, lane);
    } else {
      store_block_via_smem<kBf16, kDV, 1>(p, o, l, q_rows, me, rows, b.q0 + b.m0, h, warp, lane);
    }
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (rloc[e] < rows) store_row_lse(p, m[e], l[e], b.q0 + b.m0 + rloc[e], h, tig);
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < 2; ++e) {  // out rows not 16-byte aligned: 4-byte stores straight from the accumulators
    const auto row_o = [&](int nt, int c) { return o[4 * nt + 2 * e + c]; };
    if (rloc[e] < rows) store_row<kBf16, kDV>(p, row_o, m[e], l[e], b.q0 + b.m0 + rloc[e], h, tig);
  }
}

/// The producer's walk (and the consumers' in the form with one CTA per block): calls f(block, head, key tiles, ring
/// position, Q round) for each item of this CTA that has rows, the last two being the key tiles and the Q fills of its
/// items before, and returns the number of such items.
/// kPersistent: every gridDim.x-th of the `slots` x `h_q` items, slot fastest; else the CTA's one item (blockIdx.x =
/// slot, blockIdx.y = head).
template <bool kPersistent, typename F>
__device__ __forceinline__ uint32_t for_each_item(const PrefillParams& p, int64_t slots, int h_q, F&& f) {
  uint32_t g = 0, q_round = 0;
  const auto item = [&](int64_t slot, int h) {
    const Block b = block_of_slot<kBlockM>(p, slot);
    if (b.m0 >= b.lq) return;
    const int32_t n_tiles = int32_t((b.kv_end(p.causal, kBlockM) + kBlockN - 1) / kBlockN);
    f(b, h, n_tiles, g, q_round);
    g += uint32_t(n_tiles);
    ++q_round;
  };
  if constexpr (kPersistent) {
    const int64_t items = slots * h_q;
    for (int64_t i = blockIdx.x; i < items; i += gridDim.x) item(i % slots, int(i / slots));
  } else {
    item(blockIdx.x, int(blockIdx.y));
  }
  return q_round;
}

/// kPersistent: the grid is (CTAs, 1), walking the `slots` x `h_q` items; else (slots, h_q), one item per CTA.
template <bool kBf16, int kDQK, int kDV, bool kPersistent>
__global__ void __launch_bounds__(kThreads, 1)
    prefill_kernel(const __grid_constant__ PrefillParams p, const __grid_constant__ CUtensorMap q_map,
                   const __grid_constant__ CUtensorMap k_map, const __grid_constant__ CUtensorMap v_map,
                   int64_t slots, int h_q) {
  using L = Layout<kDQK, kDV>;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t base = raw + (1024u - raw % 1024u) % 1024u;
  ItemInfo* const info = reinterpret_cast<ItemInfo*>(smem_raw + (base - raw) + L::item);

  // The barriers first: after them no CTA-wide barrier is left. The producer walks the items and searches for their
  // blocks; in the persistent form the consumers learn each block with its Q (ItemInfo), until the producer says there
  // are no more.
  if (threadIdx.x == 0) {
    for (int i = 0; i < kOperands * kStages; ++i) {
      mbar_init(base + L::full + i * 8, kWarpgroupThreads);
      mbar_init(base + L::empty + i * 8, kReleaseArrivals);
    }
    mbar_init(base + L::q_full, 1);
    if (kPersistent) mbar_init(base + L::q_empty, kConsumers * kWarpgroupThreads);  // the other form never hands Q back
    fence_barrier_init();
  }
  __syncthreads();

  // Each role's whole walk inside its own setmaxnreg branch, so that ptxas gives each its own register budget.
  const int wg = int(threadIdx.x) / kWarpgroupThreads;
  if (wg == kProducer) {
    setmaxnreg_dec<kProducerRegs<kPersistent>>();
    if (threadIdx.x == kProducer * kWarpgroupThreads) {
      tma_prefetch_descriptor(&q_map);
      tma_prefetch_descriptor(&k_map);
      tma_prefetch_descriptor(&v_map);
    }
    const uint32_t rounds =
        for_each_item<kPersistent>(p, slots, h_q, [&](const Block& b, int h, int32_t n_tiles, uint32_t g, uint32_t q) {
          run_producer<kDQK, kDV>(p, &q_map, &k_map, &v_map, b, h, n_tiles, base, g, q, kPersistent ? info : nullptr);
        });
    if (kPersistent) end_items<kDQK, kDV>(base, rounds, info);
    cp_async_wait_all();  // no thread leaves with copies in flight
  } else {
    setmaxnreg_inc<kConsumerRegs<kPersistent>>();
    if constexpr (kPersistent) {
      uint32_t g = 0;
      for (uint32_t q = 0;; ++q) {
        mbar_wait(base + L::q_full, q & 1);
        const ItemInfo it = *info;  // before this round's Q is handed back, after which the producer rewrites it
        if (it.n_tiles < 0) break;
        run_consumer<kBf16, kDQK, kDV, true>(p, it.b, it.h, it.n_tiles, it.b.rows(kBlockM), base, wg, g);
        g += uint32_t(it.n_tiles);
      }
    } else {
      // The CTA's one block: the consumers find it themselves while the producer does, and are ready when Q lands
      // (with the producer's hand-over instead, and the persistent form's larger shared memory, 1 x 4096 measured 1.1 -
      // 1.2% slower than this; the larger memory alone cost most of 1%: docs/performance.md, ce30b8b).
      for_each_item<false>(p, slots, h_q, [&](const Block& b, int h, int32_t n_tiles, uint32_t, uint32_t) {
        const int rows = b.rows(kBlockM);
        mbar_wait(base + L::q_full, 0);
        run_consumer<kBf16, kDQK, kDV, false>(p, b, h, n_tiles, rows, base, wg, 0);
      });
    }
  }
}

}  // namespace mlakit::cuda::prefill::sm90
