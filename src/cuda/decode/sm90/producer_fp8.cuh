#pragma once
// The fp8 caches (fp8_e4m3, fp8_ds_mla; fp8_ds_v4 in sparse decode) in the Hopper producer, dense and sparse alike:
// wgmma reads 16-bit
// operands, so the producer loads each tile's fp8 rows into registers, dequantises them (smxx/dequant.cuh: the same
// rounding as the portable path) and stores them in the swizzled 16-bit layout of a stage. The stage holds
// 16-bit values and shared memory has no room left for a raw fp8 copy beside it (Q and two stages take 216 KB),
// so the copy goes through registers rather than cp.async or TMA.
//
// Each producer thread takes two rows of a tile, ptid / 4 and ptid / 4 + 32 (in a CTA pair, config.h, only the one
// of its CTA's half, the peer converting the other); the 4 threads of a row read 64 contiguous bytes per load
// instruction (16 bytes each), so every 32-byte sector fetched is used whole. A row's
// loads are all issued before the first is used, and the rows of the next tile are prefetched into L2 (each of a
// row's threads prefetches some of its lines) while this one is converted: the registers then wait on L2, not DRAM.
// A row that is not read (past the request's length, an invalid sparse id) is stored as zeros, never loaded.
// fp8_ds_v4 rows (DeepSeek V4) keep their scales in the page's scale block, not in the row: the row lookup
// (kv_row_ref) returns both addresses, and the prefetch covers the token block and the scale block.
//
// What limits it (docs/performance.md): one pass of loads is in flight at a time (two passes per tile without a
// pair, each waited for before it is converted), and the conversions issue from the same 4 warps. CTA pairs therefore
// run two producer warpgroups on alternate tiles (config.h, kProducers), with 72 and 64 registers; they do not carry
// their lookups from tile to tile (kCarry below). With two, the producers waited for free stages more than for their
// loads (ncu, 2026-11-28), so a pair over V3's rows hands its RoPE part over first, as soon as it is free; since then
// they wait on their loads again.

#include <cstdint>
#include <type_traits>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/common/ue8m0.cuh"
#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/row_prefetch.cuh"
#include "cuda/decode/sm90/smem.cuh"
#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/dequant.cuh"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode::sm90 {

inline constexpr int kFp8ThreadsPerRow = 4;
inline constexpr int kFp8RowsPerPass = kWarpgroupThreads / kFp8ThreadsPerRow;  // 32
inline constexpr int kFp8Passes = kBlockN / kFp8RowsPerPass;                   // 2

/// What one thread loads of one row: 16-byte e4m3 pieces q + 4 j (columns [64 j + 16 q, +16) of chunk j), for every
/// chunk the row stores in e4m3; the RoPE part where it is bf16 (fp8_ds_mla, fp8_ds_v4: bf16 pieces q and q + 4 of
/// the chunk after the e4m3 ones); and the row's group scales (fp8_ds_mla: four fp32 in the row; fp8_ds_v4: eight
/// UE8M0 bytes of the page's scale block, the eighth unused).
///   fp8_e4m3:   kDqk / 64 e4m3 chunks (9, or 8 in V4's geometry), no bf16 part, no scales.
///   fp8_ds_mla: 8 e4m3 chunks, bf16 chunk 8.      fp8_ds_v4: 7 e4m3 chunks, bf16 chunk 7.
template <KvKind kKind, int kDqk>
struct Fp8Row {
  static constexpr int kE4m3Loads = kKind == KvKind::kE4M3   ? kDqk / kSwizzleValues
                                    : kKind == KvKind::kDsMla ? ds_mla::kDimC / kSwizzleValues
                                                              : ds_v4::kDimC / kSwizzleValues;
  static constexpr int kBf16Loads = kKind == KvKind::kE4M3 ? 0 : 2;
  static constexpr int kE4m3Offset = kKind == KvKind::kDsMla ? int(ds_mla::kQuantOffset) : 0;
  static constexpr int kBf16Offset = kKind == KvKind::kDsMla ? int(ds_mla::kRopeOffset) : int(ds_v4::kRopeOffset);
  static_assert(kKind != KvKind::k16Bit);
  static_assert(kE4m3Loads + (kBf16Loads > 0 ? 1 : 0) == Geometry<kDqk>::kQkChunks, "the loads fill every chunk");
  static_assert(kKind != KvKind::kDsMla || ds_mla::kGroupSize == 2 * kSwizzleValues, "two chunks per ds_mla scale");
  static_assert(kKind != KvKind::kDsV4 || ds_v4::kGroupSize == kSwizzleValues, "one ds_v4 scale per chunk");
  using Scales = std::conditional_t<kKind == KvKind::kDsV4, uint2, float4>;
  uint4 e4m3[kE4m3Loads];
  uint4 bf16[kBf16Loads > 0 ? kBf16Loads : 1];
  Scales scales;
};

/// Loads thread q's share of row `ref` (ref.row null: zeros, nothing read). kEvictFirst: under the L2 evict-first
/// policy (load_tile_fp8's kRowsEvictFirst says where). The sparse and dense branches are spelled as they were
/// measured and tested (each compiles to that SASS: scripts/sass-compare.sh); the dense one is the code from before
/// the policy.
template <KvKind kKind, int kDqk, bool kSparse, bool kEvictFirst>
__device__ __forceinline__ void load_fp8_row(const RowRef& ref, int q, Fp8Row<kKind, kDqk>& r) {
  using R = Fp8Row<kKind, kDqk>;
  const uint8_t* row = ref.row;
  const uint4 zero = make_uint4(0, 0, 0, 0);
  if constexpr (kSparse) {  // read once, mostly: evict-first where kEvictFirst
    const uint64_t policy = l2_evict_first_policy();
#pragma unroll
    for (int j = 0; j < R::kE4m3Loads; ++j) {
      const void* src = row + R::kE4m3Offset + 16 * (q + 4 * j);
      r.e4m3[j] = !row ? zero : kEvictFirst ? ldg128_hint(src, policy) : __ldg(static_cast<const uint4*>(src));
    }
#pragma unroll
    for (int k = 0; k < R::kBf16Loads; ++k) {  // bf16 pieces q and q + 4 of the RoPE chunk
      const void* src = row + R::kBf16Offset + 16 * (q + 4 * k);
      r.bf16[k] = !row ? zero : kEvictFirst ? ldg128_hint(src, policy) : __ldg(static_cast<const uint4*>(src));
    }
  } else {  // dense: plain loads (their prefetch keeps them evict_last)
#pragma unroll
    for (int j = 0; j < R::kE4m3Loads; ++j) {
      r.e4m3[j] = row ? __ldg(reinterpret_cast<const uint4*>(row + R::kE4m3Offset + 16 * (q + 4 * j))) : zero;
    }
#pragma unroll
    for (int k = 0; k < R::kBf16Loads; ++k) {
      r.bf16[k] = row ? __ldg(reinterpret_cast<const uint4*>(row + R::kBf16Offset + 16 * (q + 4 * k))) : zero;
    }
  }
  if constexpr (kKind == KvKind::kDsMla) {
    r.scales = row ? __ldg(reinterpret_cast<const float4*>(row + ds_mla::kScaleOffset)) : make_float4(0, 0, 0, 0);
  } else if constexpr (kKind == KvKind::kDsV4) {
    r.scales = row ? __ldg(reinterpret_cast<const uint2*>(ref.scales)) : make_uint2(0, 0);
  }
}

/// Dequantises a thread's share of row `row` of a tile and stores it into the stage at generic address `stage`: the
/// stage chunks [kLo, kHi) of the row (default: all of them).
template <bool kBf16, KvKind kKind, int kDqk, int kLo = 0, int kHi = Geometry<kDqk>::kQkChunks>
__device__ __forceinline__ void store_fp8_row(const Fp8Row<kKind, kDqk>& r, uint8_t* stage, int row, int q) {
  using R = Fp8Row<kKind, kDqk>;
  static_assert(0 <= kLo && kLo <= kHi && kHi <= Geometry<kDqk>::kQkChunks, "a range of the row's chunks");
  constexpr int kE4m3End = kHi < R::kE4m3Loads ? kHi : R::kE4m3Loads;
  auto put = [&](int chunk, int piece, uint4 v) {
    *reinterpret_cast<uint4*>(stage + chunk * kChunkBytes + swizzle128(uint32_t(row), uint32_t(piece))) = v;
  };
#pragma unroll
  for (int j = kLo; j < kE4m3End; ++j) {
    const uint2 lo = make_uint2(r.e4m3[j].x, r.e4m3[j].y);
    const uint2 hi = make_uint2(r.e4m3[j].z, r.e4m3[j].w);
    if constexpr (kKind == KvKind::kE4M3) {
      put(j, 2 * q, e4m3x8_to<kBf16>(lo));
      put(j, 2 * q + 1, e4m3x8_to<kBf16>(hi));
    } else if constexpr (kKind == KvKind::kDsV4 && kBf16) {
      // A UE8M0 scale is a power of two: multiplied in bf16 (dequant.cuh), one instruction per pair fewer.
      const float s = ue8m0_to_float(((j < 4 ? r.scales.x : r.scales.y) >> (8 * (j % 4))) & 0xffu);
      const __nv_bfloat162 s2 = __float2bfloat162_rn(s);
      put(j, 2 * q, e4m3x8_pow2_scaled_to_bf16(lo, s2));
      put(j, 2 * q + 1, e4m3x8_pow2_scaled_to_bf16(hi, s2));
    } else {
      float s;
      if constexpr (kKind == KvKind::kDsMla) {
        const float scales[ds_mla::kNumGroups] = {r.scales.x, r.scales.y, r.scales.z, r.scales.w};
        s = scales[j / 2];
      } else {
        s = ue8m0_to_float(((j < 4 ? r.scales.x : r.scales.y) >> (8 * (j % 4))) & 0xffu);
      }
      put(j, 2 * q, e4m3x8_scaled_to<kBf16>(lo, s));
      put(j, 2 * q + 1, e4m3x8_scaled_to<kBf16>(hi, s));
    }
  }
  if constexpr (kLo <= R::kE4m3Loads && R::kE4m3Loads < kHi) {  // the bf16 chunk
#pragma unroll
    for (int k = 0; k < R::kBf16Loads; ++k) put(R::kE4m3Loads, q + 4 * k, bf16x8_to<kBf16>(r.bf16[k]));
  }
}

/// The parts of a stage as a set (bit p: part p), and a call of f(std::integral_constant<int, part>) for each part of
/// the set in the order Q K^T reads them (issue_qk: RoPE, V half 0, V half 1).
inline constexpr int part_bit(int part) { return 1 << part; }
template <int kSet, class F>
__device__ __forceinline__ void for_each_part_of(F&& f) {
  if constexpr ((kSet & part_bit(kPartRope)) != 0) f(std::integral_constant<int, kPartRope>{});
  if constexpr ((kSet & part_bit(kPartHalf0)) != 0) f(std::integral_constant<int, kPartHalf0>{});
  if constexpr ((kSet & part_bit(kPartHalf1)) != 0) f(std::integral_constant<int, kPartHalf1>{});
}

/// A CTA pair's hand-over of this CTA's half of the parts kSet of stage st, once this producer's threads stored their
/// rows of them (and fenced them for the async proxy): after the producer's barrier, thread 0 copies each part's half
/// into the peer's stage, completing on the peer's full barrier, and arms this CTA's full barrier for the bytes of the
/// peer's half; the other threads arrive on it. `half`: the byte offset of this CTA's half in a chunk.
template <int kSet>
__device__ __forceinline__ void hand_half_to_peer(const Smem& sm, uint32_t st, uint32_t half, int ptid, int peer,
                                                  int producer) {
  named_barrier_sync(kBarProducer + producer, kWarpgroupThreads);  // every row of this CTA's half of the parts
  for_each_part_of<kSet>([&](auto part_c) {
    constexpr int kPart = decltype(part_c)::value;
    if (ptid == 0) {
      mbar_arrive_expect_tx(sm.full(st, kPart), part_pair_bytes(kPart));
      for (int c = 0; c < part_chunks(kPart); ++c) {
        const uint32_t at = sm.stage(st) + (part_first_chunk(kPart) + c) * kChunkBytes + half;
        bulk_copy_to_peer(at, at, kPairChunkBytes, sm.full(st, kPart), uint32_t(peer));
      }
    } else {
      mbar_arrive(sm.full(st, kPart));
    }
  });
}

/// Fills stage `st` with the tile of plan request `req` starting at token (or index column) t0, all three parts,
/// once their empty barriers allow (parity free_parity), and arrives on their full barriers. `has_next`: the
/// request has a tile after this one in this piece, whose rows are prefetched into L2. `peer` >= 0 (a CTA pair,
/// config.h): this CTA converts only its half of the rows (pass = its rank) and copies them into the peer's stage,
/// completing on the peer's full barriers; its own full barriers expect the peer's half the same way. A pair over V3's
/// rows does that in two steps (the RoPE part, then the V halves), each once its own parts are free (below).
///
/// `carry` holds the row lookups of this tile, made by the previous call's prefetch (`carried`: true after the first
/// tile of a piece), and this call leaves the next tile's there, so no row waits for its id or page twice (ncu, V3.2
/// and V4: the producer was busy ~96% of each tile, a fifth of it waiting for the same index loads twice, for the
/// prefetch and for the rows). kLoadFirst (CTAs without a pair): the first row's loads are issued before the prefetch.
/// Measured on the H100 (docs/performance.md, 2026-11-27), both together: unpaired fp8 rows -5.9 to -13.3%, but CTA
/// pairs, which convert one row per thread and copy it to the peer, +0.2 to +4.9%; so pairs load in place.
///
/// kStride: tiles from this producer's tile to its next (config.h, kProducers: 2 in CTA pairs over fp8 caches, which
/// carry nothing); `has_next` and the prefetch are about that tile. `producer`: its index (its named barrier).
template <bool kBf16, KvKind kKind, bool kSparse, int kDqk, bool kLoadFirst, int kStride>
__device__ __forceinline__ void load_tile_fp8(const DecodeParams& p, int32_t req, int32_t main_len, int32_t len, int64_t t0,
                                              bool has_next, const Smem& sm, uint32_t st, uint32_t free_parity,
                                              int ptid, int peer, int producer, RowRef (&carry)[kFp8Passes],
                                              bool carried) {
  static_assert(kFp8Passes == 2 && kFp8RowsPerPass == kPairRows, "a pair splits a tile by passes");
  constexpr int kRowBytes = kv_kind_row_bytes(kKind, kDqk);  // fp8_ds_v4: the token block (scales: below)
  constexpr bool kScales = kKind == KvKind::kDsV4;
  constexpr int kUsedParts = Geometry<kDqk>::kParts;
  const int q = ptid % kFp8ThreadsPerRow;
  const int row0 = ptid / kFp8ThreadsPerRow;
  const int first_pass = peer >= 0 ? (peer ^ 1) : 0;  // a pair: this CTA's rank
  const int end_pass = peer >= 0 ? first_pass + 1 : kFp8Passes;
  const uint32_t half = uint32_t(first_pass) * kPairChunkBytes;  // a pair: this CTA's half of every chunk (bytes)
  // This tile's lookups, when carried (carry is overwritten below). k is a run-time pass index: selects, not an
  // indexed array, keep them in registers (an indexed one went to the stack).
  const RowRef mine0 = carry[0], mine1 = carry[1];
  // Two producers (kStride 2) look their rows up again rather than carry them: carrying made ptxas spill 84 - 132
  // bytes in their 64 or 72 registers, and the dense 128-head rows 8 - 9% slower than one producer, the sparse ones up
  // to 4.7% (docs/performance.md, 2026-11-28).
  constexpr bool kCarry = kStride == 1;
  // Sparse rows are read once (mostly): their prefetches go at normal priority and, in CTAs without a pair, their
  // loads evict-first, so that they stop pushing out what the L2 held (V3.2 rows -2.9 to -3.8%, V4 -0.5 to -1.7% on
  // an H200 with the anchors' flush). The loads' hint made CTA pairs up to 1.6% slower, and dense decode keeps its
  // plain loads and evict_last prefetches: with the sparse form its (128, 1, 32768, 128) fp8_ds_mla row (CTA pairs:
  // the prefetches' priority only) was 2.1% slower in both runs, its other rows -1.5 to +0.9% (docs/performance.md,
  // "The L2 flush's dirty lines").
  constexpr bool kRowsEvictFirst = kSparse && kStride == 1;
  // Sparse tiles count index columns in 32 bits (a tile that exists starts below the request's length, which
  // request_len caps at INT32_MAX): the 64-bit position was a loop invariant that ptxas spilled, and its reload delayed
  // every row lookup. The dense kernels keep 64-bit positions: at 32 bits their 128-head pairs were 0.3 - 1.8% slower
  // (H200, 2026-11-28, docs/experiments).
  const auto token = [&](int64_t tile_t0, int k) {
    if constexpr (kSparse) return int64_t(int32_t(tile_t0) + row0 + kFp8RowsPerPass * k);
    else return tile_t0 + row0 + kFp8RowsPerPass * k;
  };
  const auto ref_of = [&](int k) {  // the row of pass k of this tile
    if (kCarry && carried) return k == 0 ? mine0 : mine1;
    RowRef ref{};
    with_tile_id_set<kSparse>(t0, kBlockN, main_len, len, [&](auto set) {
      ref = kv_row_ref<kSparse, kScales, decltype(set)::value>(p, req, token(t0, k), main_len, len);
    });
    return ref;
  };
  Fp8Row<kKind, kDqk> r;
  if constexpr (kLoadFirst) {
    load_fp8_row<kKind, kDqk, kSparse, kRowsEvictFirst>(ref_of(first_pass), q, r);  // in flight under the prefetch
  }
  if (has_next) {
    // Each of a row's 4 threads prefetches every 4th of the 128-byte lines the row touches, and thread 0 its fp8_ds_v4
    // scale block (row_prefetch.cuh): the scale block's first use was the producer's largest stall in the V4 profile
    // (docs/performance.md, 2026-11-25).
    for (int k = first_pass; k < end_pass; ++k) {
      const int64_t next_t0 = t0 + kStride * kBlockN;  // this producer's next tile
      const int64_t t = token(next_t0, k);
      with_tile_id_set<kSparse>(next_t0, kBlockN, main_len, len, [&](auto set) {
        const RowRef next = kv_row_ref<kSparse, kScales, decltype(set)::value>(p, req, t, main_len, len);
        if (kCarry && k == 0) carry[0] = next;
        if (kCarry && k == 1) carry[1] = next;
        prefetch_row_l2<kRowBytes, kScales, !kSparse>(next, q, kFp8ThreadsPerRow);
      });
    }
  }
  uint8_t* stage = sm.ptr + (sm.stage(st) - sm.base);
  if constexpr (Geometry<kDqk>::kRopePart) {  // V4's rows (no RoPE part) take the one-step hand-over below
    if (peer >= 0) {
      // A CTA pair over V3's rows (576 columns): one row per thread, handed over (stored, copied to the peer, announced
      // on both CTAs' full barriers) in two steps: the RoPE part as soon as both CTAs' consumers released it (after
      // their Q K^T: a softmax and two P V before the V halves are free), then the V halves, so that the next Q K^T
      // starts on the RoPE part while the halves are converted. H200, 2026-11-28 (docs/performance.md): dense
      // fp8_ds_mla at 128 heads -4.7 to -5.7%, V3.2 -1.0 to -1.2%. V4's rows (no RoPE part) go in one step below:
      // handed over a V half at a time they were 4.8 - 5.7% slower; V3's dense rows in three steps (a V half at a time
      // after the RoPE part) gained only 2.3 - 3.1%.
      const int row = row0 + kFp8RowsPerPass * first_pass;
      load_fp8_row<kKind, kDqk, kSparse, kRowsEvictFirst>(ref_of(first_pass), q, r);
      const auto hand_over = [&](auto set_c) {
        constexpr int kSet = decltype(set_c)::value;
        for_each_part_of<kSet>([&](auto part_c) { mbar_wait(sm.empty(st, decltype(part_c)::value), free_parity); });
        for_each_part_of<kSet>([&](auto part_c) {
          constexpr int kLo = part_first_chunk(decltype(part_c)::value);
          store_fp8_row<kBf16, kKind, kDqk, kLo, kLo + part_chunks(decltype(part_c)::value)>(r, stage, row, q);
        });
        fence_proxy_async();  // the writer's fence (below), before the copy and the consumers read the parts
        hand_half_to_peer<kSet>(sm, st, half, ptid, peer, producer);
      };
      hand_over(std::integral_constant<int, part_bit(kPartRope)>{});
      hand_over(std::integral_constant<int, part_bit(kPartHalf0) | part_bit(kPartHalf1)>{});
      return;
    }
  }
#pragma unroll 1
  for (int k = first_pass; k < end_pass; ++k) {
    const int row = row0 + kFp8RowsPerPass * k;
    if (!kLoadFirst || k != first_pass) load_fp8_row<kKind, kDqk, kSparse, kRowsEvictFirst>(ref_of(k), q, r);
    if (k == first_pass) {
#pragma unroll
      for (int part = 0; part < kUsedParts; ++part) mbar_wait(sm.empty(st, part), free_parity);
    }
    store_fp8_row<kBf16, kKind, kDqk>(r, stage, row, q);
  }
  // The consumers' wgmma (and a copy to the peer) read these stores through the async proxy. This writer-side fence is
  // the only one fp8 tiles get: the consumers skip theirs for them (tile_source.cuh, consumer_fences).
  fence_proxy_async();
  if (peer < 0) {
#pragma unroll
    for (int part = 0; part < kUsedParts; ++part) mbar_arrive(sm.full(st, part));
    return;
  }
  constexpr int kAllParts = part_bit(kUsedParts) - 1;  // parts 0 .. kUsedParts - 1
  hand_half_to_peer<kAllParts>(sm, st, half, ptid, peer, producer);
}

}  // namespace mlakit::cuda::decode::sm90
