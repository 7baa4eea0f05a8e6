#pragma once
// L2 prefetches of fp8 cache rows on the Hopper path, ahead of the producer that loads them into registers
// (producer_fp8.cuh). The producer prefetches the next tile's rows itself, but it is bound by its loads' latency: the
// profile of V3.2 b128 s_q 2 h128 (docs/performance.md, 2026-11-28) found its prefetch of tile t + 1, issued while it
// loads tile t, turning only a sixth of the row loads into L2 hits. So the V warpgroup, which waits for the S
// warpgroup's next P with idle issue slots, also prefetches the rows of a tile further ahead (RowsAhead), where that
// was measured to help.

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/decode/sm90/config.h"
#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode::sm90 {

/// Thread q of the `threads` that share row `ref` prefetches every threads-th 128-byte line the row touches (counted
/// from the line holding its first byte: a row may start anywhere in a line) and, q = 0, its fp8_ds_v4 scale block,
/// which lies apart in the page (kScales). A row without bytes (ref.row null) is skipped. kEvictLast: prefetch_l2's.
template <int kRowBytes, bool kScales, bool kEvictLast>
__device__ __forceinline__ void prefetch_row_l2(const RowRef& ref, int q, int threads) {
  if (ref.row == nullptr) return;
  const auto first = reinterpret_cast<uintptr_t>(ref.row) & ~uintptr_t(127);
  const int span = int(reinterpret_cast<uintptr_t>(ref.row) - first) + kRowBytes;  // bytes from `first`
#pragma unroll
  for (int line = q; line * 128 < span; line += threads) {
    prefetch_l2<kEvictLast>(reinterpret_cast<const void*>(first + uintptr_t(line) * 128));
  }
  if (kScales && q == 0) prefetch_l2<kEvictLast>(ref.scales);
}

/// Tiles past the consumers' current one whose rows the V warpgroup prefetches: the producer fills the stage of tile
/// t + 2 once tile t is released, prefetching t + 3 as it does, so 4 reaches a tile the producer has not yet asked for.
/// Not more: 5 and 6 made V3.2 b128 h64 22% and 33% slower on the H100 (2026-11-28), at normal L2 priority too; not
/// profiled, likeliest each tile further ahead keeps another ~42 KB per CTA of rows in L2 until they evict each other.
inline constexpr int kAheadTiles = 4;

/// The V warpgroup's share of that prefetch for one piece (a request's run of tiles) of a sparse CTA without a pair:
/// each thread takes one of the tile's 64 rows with another thread (every other 128-byte line). The row's id is loaded
/// one tile before it is used, so the prefetch never waits on a dependent load.
///
/// Where it is used (consumer.cuh, run_v_warpgroup): sparse V3.2-geometry fp8 caches in CTAs without a pair, at
/// most 64 query rows. Measured on the H100 (docs/performance.md, 2026-11-28) for every fp8 kernel: V3.2 b128 s_q 2
/// h64 (fp8_ds_mla, unpaired, pieces of 32 tiles) -4.8%; but CTA pairs (V3.2 and V4 at 128 heads, dense fp8_ds_mla)
/// -1.5 to +0.9%, V4 at 64 heads (pieces of 8 - 10 tiles) +0.7 / +2.6%, dense fp8_ds_mla at 64 heads +2.2%: there the
/// producer's own prefetch covers its rows, or the pieces are too short to run ahead in.
template <KvKind kKind, int kDqk>
struct RowsAhead {
  static constexpr int kRowBytes = kv_kind_row_bytes(kKind, kDqk);
  static constexpr int kThreadsPerRow = kWarpgroupThreads / kBlockN;  // 2
  int row = 0;           // of a tile
  int q = 0;             // this thread's place among the row's threads
  int32_t main_len = 0;  // the request's main columns
  int32_t id = -1;       // the id of this thread's row of the next tile to prefetch; -1: none

  RowsAhead() = default;  // kernels that do not prefetch ahead
  /// vt: the thread's index in the V warpgroup.
  __device__ RowsAhead(const DecodeParams& p, const Piece& pc, int vt)
      : row(vt / kThreadsPerRow), q(vt % kThreadsPerRow), main_len(request_main_len(p.lens, pc.req)) {
    load_id(p, pc, kAheadTiles);
  }

  /// Loads the id of this thread's row of piece tile j (none past the piece or the request's length).
  __device__ __forceinline__ void load_id(const DecodeParams& p, const Piece& pc, int32_t j) {
    id = j < pc.n_tiles ? sparse_id<IdSet::kMixed>(p, pc.req, int64_t(pc.t_begin + j) * kBlockN + row, main_len, pc.len).id
                        : -1;
  }

  /// Prefetches this thread's share of piece tile j's row (its id loaded by load_id(j) before), then loads the id of
  /// tile j + 1.
  __device__ __forceinline__ void prefetch_then_load(const DecodeParams& p, const Piece& pc, int32_t j) {
    if (j < pc.n_tiles) {
      const int64_t t = int64_t(pc.t_begin + j) * kBlockN + row;
      prefetch_row_l2<kRowBytes, false, false>(sparse_row_ref_of<false>(p, SparseId{id, t >= main_len}), q,
                                               kThreadsPerRow);
    }
    load_id(p, pc, j + 1);
  }
};

}  // namespace mlakit::cuda::decode::sm90
