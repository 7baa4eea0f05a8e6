#pragma once
// Device helpers shared by the plan and every decode kernel family: how many KV tiles a request has. The
// plan and the kernel it schedules must agree on this to the tile, so it lives in one place.

#include <cstdint>
#include <type_traits>

#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"

namespace mlakit::cuda::decode {

/// KV tiles of 2^tile_shift tokens of a request of length L. A request with L = 0 still gets one (empty)
/// tile, so that some CTA writes its out = 0 and lse = -inf (docs/spec.md section 1) through the ordinary path.
__host__ __device__ inline int32_t request_tiles(int32_t len, int tile_shift) {
  const int32_t l = len > 0 ? len : 0;
  const int32_t t = int32_t((int64_t(l) + (int64_t(1) << tile_shift) - 1) >> tile_shift);
  return t > 0 ? t : 1;
}

/// One length table of RequestLengths: entry r / fold clamped to [0, cap], or cap without a table.
__device__ inline int32_t clamped_len(const int32_t* lens, int64_t stride, FastDiv fold, int32_t cap, int32_t r) {
  if (lens == nullptr) return cap;
  const int32_t v = lens[int64_t(fast_div(r, fold)) * stride];  // requests are int32
  return v < 0 ? 0 : v > cap ? cap : v;
}

/// Sparse decode: the main set's index columns of plan request r (all its columns without an extra cache).
__device__ inline int32_t request_main_len(const RequestLengths& l, int32_t r) {
  return clamped_len(l.lens, l.stride, l.fold_div, l.cap, r);
}

/// KV length of plan request r (RequestLengths), in [0, cap] (sparse with an extra cache: main + extra columns).
/// kSparse = false is dense decode's special case (fold 1, lengths always given, no cap), spelled out so that the
/// dense kernels carry no division or clamp: the Hopper producer had 72 registers when it was written (128 now).
template <bool kSparse>
__device__ inline int32_t request_len(const RequestLengths& l, int32_t r) {
  if constexpr (kSparse) {
    const int32_t main = request_main_len(l, r);
    if (l.extra_cap == 0) return main;
    // Both parts are at most their caps, which validation bounds by int32 tensor extents; summed in 64 bits anyway.
    const int64_t sum = int64_t(main) + clamped_len(l.extra_lens, l.extra_stride, l.fold_div, l.extra_cap, r);
    return sum > INT32_MAX ? INT32_MAX : int32_t(sum);
  } else {
    const int32_t v = l.lens[int64_t(r) * l.stride];
    return v > 0 ? v : 0;
  }
}

/// End of the keys query token i of dense request r (length len, this rank's tokens) sees under the causal rule,
/// not clamped (docs/spec.md sections 1 and 11).
__device__ inline int64_t causal_limit(const DecodeParams& p, int32_t r, int32_t i, int32_t len) {
  if (p.causal_limits != nullptr) return p.causal_limits[int64_t(r) * kMaxCausalRows + i];
  return int64_t(len) - p.s_q + i + 1;
}

/// Element offset of plan request r in a [b, s_q, ...] tensor with batch stride sb and token stride ss: request
/// r is batch entry r in dense decode and query token (r / s_q, r % s_q) in sparse decode (fold s_q).
template <bool kSparse>
__device__ inline int64_t request_offset(const DecodeParams& p, int32_t r, int64_t sb, int64_t ss) {
  if constexpr (kSparse) {
    const int32_t b = fast_div(r, p.lens.fold_div);  // r / s_q without a division sequence: every row lookup asks
    return int64_t(b) * sb + int64_t(r - b * p.lens.fold) * ss;
  } else {
    return int64_t(r) * sb;
  }
}

/// A cache row as a kernel copies it: its bytes, and for fp8_ds_v4 its 8-byte scale block (the layout
/// of docs/spec.md section 4 puts it after the page's token blocks); row = null for no row.
struct RowRef {
  const uint8_t* row;
  const uint8_t* scales;
  const uint8_t* k_pe = nullptr;  // a split cache: the row's k_pe columns (row then holds kv_c only)
};

/// Which cache a span of sparse index columns may name (DeepSeek V4's extra cache, docs/spec.md section 2.1): both
/// (kMixed), or, when a whole tile is known to lie on one side of main_len, only the main (kMainOnly) or only the
/// extra (kExtraOnly) one. The one-sided forms drop the per-column choice of ids, pool and geometry: the Hopper
/// producer is instruction-bound on fp8 rows, and the choice cost its V3.2 anchors 3 - 4% (2026-11-25).
enum class IdSet : int { kMixed = 0, kMainOnly = 1, kExtraOnly = 2 };

/// The IdSet of the tile of index columns [t0, t0 + n) of a request with main_len main columns out of len: one side
/// when every column below len is a main one, or every one is an extra one. Uniform across a CTA.
__device__ inline IdSet tile_id_set(int64_t t0, int n, int32_t main_len, int32_t len) {
  if (int64_t(main_len) >= min(int64_t(len), t0 + n)) return IdSet::kMainOnly;  // always so without an extra cache
  return t0 >= main_len ? IdSet::kExtraOnly : IdSet::kMixed;
}

/// An index column's id and the cache it names (docs/spec.md sections 2 and 2.1): columns [0, main_len) of a request
/// are ids of the main cache, [main_len, len) ids of the extra cache; id = -1 past len.
struct SparseId {
  int32_t id;
  bool extra;
};

/// Index column t of plan request r (kSet: what the caller knows of t's side; a one-sided kSet is only valid for
/// columns on that side, or past len). Written without early returns, so that a warp stays converged through it (the
/// Hopper S warpgroup reads ids a tile ahead and ballots on their validity before its barriers and wgmma waits).
template <IdSet kSet>
__device__ inline SparseId sparse_id(const DecodeParams& p, int32_t r, int64_t t, int32_t main_len, int32_t len) {
  const bool extra = kSet == IdSet::kMixed ? t >= main_len : kSet == IdSet::kExtraOnly;
  int32_t id = -1;
  if (t < len) {
    const int64_t at = extra ? request_offset<true>(p, r, p.extra_indices_stride_b, p.extra_indices_stride_s) + (t - main_len)
                             : request_offset<true>(p, r, p.indices_stride_b, p.indices_stride_s) + t;
    id = (extra ? p.extra_indices : p.indices)[at];
  }
  return SparseId{id, extra};
}

/// Whether an id names a row of its cache: every negative id and every id past the cache is no row.
__device__ inline bool names_row(const DecodeParams& p, SparseId s) {
  return s.id >= 0 && s.id < (s.extra ? p.extra_num_rows : p.num_rows);
}

/// Sparse decode with the extra cache: the RowRef of an id read by sparse_id, through its cache's pool and page
/// geometry; no row (never dereferenced) for an id outside its cache. kScales: fp8_ds_v4 pages. A kernel may read the
/// id early and resolve it later, so that the id load's latency is not paid where the address is needed.
template <bool kScales>
__device__ inline RowRef sparse_row_ref_of(const DecodeParams& p, SparseId s) {
  RowRef ref{nullptr, nullptr};
  if (!names_row(p, s)) return ref;
  const bool extra = s.extra;
  const int32_t page_size = extra ? p.extra_page_size : p.page_size;
  const int32_t page = fast_div(s.id, extra ? p.extra_page_div : p.page_div);  // 0 <= id < 2^31
  const int32_t slot = s.id - page * page_size;
  const uint8_t* page_base = (extra ? p.extra_pages : p.pages) + int64_t(page) * (extra ? p.extra_page_stride_bytes
                                                                                         : p.page_stride_bytes);
  ref.row = page_base + int64_t(slot) * (extra ? p.extra_row_stride_bytes : p.row_stride_bytes);
  if constexpr (kScales) {
    ref.scales = page_base + int64_t(page_size) * ds_v4::kTokenBytes + int64_t(slot) * ds_v4::kScaleBytes;
  }
  return ref;
}

/// Index column t of plan request r as a RowRef (sparse_id, then sparse_row_ref_of); no row past len. kSet as in
/// sparse_id.
template <bool kScales, IdSet kSet = IdSet::kMixed>
__device__ inline RowRef sparse_row_ref(const DecodeParams& p, int32_t r, int64_t t, int32_t main_len, int32_t len) {
  return sparse_row_ref_of<kScales>(p, sparse_id<kSet>(p, r, t, main_len, len));
}

/// Dense decode: the page list of request r, row r of the block table or its part of the flat list.
__device__ inline const int32_t* request_pages(const DecodeParams& p, int32_t r) {
  return p.block_table + (p.block_table_indptr != nullptr ? int64_t(p.block_table_indptr[r])
                                                           : int64_t(r) * p.block_table_stride);
}

/// Dense decode: byte offset in the pool of token t of request r, found through the block table, or -1 when t is
/// at or past the request's length (never dereferenced).
__device__ inline int64_t dense_row_offset(const DecodeParams& p, int32_t r, int64_t t, int32_t len) {
  if (t >= len) return -1;
  const int32_t page = request_pages(p, r)[t >> p.page_shift];
  return int64_t(page) * p.page_stride_bytes + (t & ((int64_t(1) << p.page_shift) - 1)) * p.row_stride_bytes;
}

/// Dense decode for the portable kernel: token t of request r as a RowRef (both parts of a split cache), or no row.
__device__ inline RowRef dense_row_ref(const DecodeParams& p, int32_t r, int64_t t, int32_t len) {
  if (t >= len) return RowRef{nullptr, nullptr};
  const int64_t page = request_pages(p, r)[t >> p.page_shift];
  const int64_t slot = t & ((int64_t(1) << p.page_shift) - 1);
  RowRef ref{p.pages + page * p.page_stride_bytes + slot * p.row_stride_bytes, nullptr};
  if (p.k_pe_pages != nullptr) ref.k_pe = p.k_pe_pages + page * p.k_pe_page_stride_bytes + slot * p.k_pe_row_stride_bytes;
  return ref;
}

/// The Hopper producer's row lookup: KV token (dense) or index column (sparse, either cache; kSet as in
/// sparse_row_ref) t of plan request r as a RowRef (row = null: no row, never read). main_len: the request's main
/// index columns (its length without an extra cache; unused in dense decode). Dense rows go through the offset alone
/// (no split cache on that path).
template <bool kSparse, bool kScales, IdSet kSet>
__device__ inline RowRef kv_row_ref(const DecodeParams& p, int32_t r, int64_t t, int32_t main_len, int32_t len) {
  if constexpr (kSparse) {
    return sparse_row_ref<kScales, kSet>(p, r, t, main_len, len);
  } else {
    const int64_t off = dense_row_offset(p, r, t, len);
    return RowRef{off >= 0 ? p.pages + off : nullptr, nullptr};
  }
}

/// Partition g's KV work: from `start` up to, not including, `end` (the next partition's start, (b, 0) for the last),
/// in (request, tile) order.
struct PartitionBounds {
  PartitionStart start;
  PartitionStart end;
};

/// Cost units of plan request r in the plan's work model (plan.cu): its tiles plus a fixed cost.
template <bool kSparse>
__device__ __forceinline__ int64_t request_cost(const RequestLengths& l, int32_t r, int tile_shift) {
  return request_tiles(request_len<kSparse>(l, r), tile_shift) + kFixedCostTiles;
}

/// The plan's whole-request rule (plan.cu, cta_plan.cuh): k = ceil(b / G) requests per partition, none split, when that
/// keeps the busiest partition (at most k requests of at most cmax cost units each) within kSplitCostTiles units of the
/// even split's width, that is when splitting would save less than it costs; else 0 (split as the work model cuts).
/// Uniform lengths meet it where k requests fill a partition nearly as well as the even split: 128 requests of 4096
/// tokens over 66 partitions, 2 each, 3% over the width.
__device__ inline int64_t whole_requests_per_partition(int64_t b, int64_t partitions, int64_t cmax, int64_t width) {
  const int64_t k = (b + partitions - 1) / partitions;
  return k * cmax <= width + kSplitCostTiles ? k : 0;
}

/// The partial slot of the part of a split request that partition g holds (RequestPlan in params.h): 2 g for the
/// request g starts in (its first), 2 g + 1 for its last one, when that one goes on into the next partition.
__host__ __device__ inline int64_t partition_slot(int64_t g, bool first_request) { return 2 * g + (first_request ? 0 : 1); }

/// The partial slot of part j (0 .. num_splits - 1) of a split request: its first part's slot, then the slot of every
/// later partition g, each of which starts inside the request (so the request is g's first).
__host__ __device__ inline int64_t split_slot(const RequestPlan& rp, int j) {
  return j == 0 ? int64_t(rp.split_base) : partition_slot(int64_t(rp.first_partition) + j, true);
}

/// Calls f(std::integral_constant<IdSet, s>{}) with the IdSet s of a tile (tile_id_set; kMainOnly in dense decode), so
/// that the code inside is compiled once per side and the choice, uniform across the CTA, is made once per tile.
template <bool kSparse, typename F>
__device__ __forceinline__ void with_tile_id_set(int64_t t0, int n, int32_t main_len, int32_t len, F&& f) {
  const IdSet s = kSparse ? tile_id_set(t0, n, main_len, len) : IdSet::kMainOnly;
  if (s == IdSet::kMainOnly) {
    f(std::integral_constant<IdSet, IdSet::kMainOnly>{});
  } else if (s == IdSet::kExtraOnly) {
    f(std::integral_constant<IdSet, IdSet::kExtraOnly>{});
  } else {
    f(std::integral_constant<IdSet, IdSet::kMixed>{});
  }
}

/// The attention sink's factor 1 / (1 + exp(sink_h - lse)) of a non-empty row (docs/spec.md section 2): 1 without a
/// sink or for sink = -inf, 0 for sink = +inf. lse is in natural log.
__device__ inline float sink_factor(const DecodeParams& p, int h, float lse) {
  if (p.attn_sink == nullptr) return 1.0f;
  return 1.0f / (1.0f + expf(p.attn_sink[h] - lse));
}

/// One piece of a partition's KV work: tiles [t_begin, t_begin + n_tiles) of request `req` (length len). slot: -1 when
/// the piece is the whole request (its rows go straight to out), else the partial slot its rows go to (split_slot).
struct Piece {
  int32_t req;
  int32_t len;
  int32_t t_begin;
  int32_t n_tiles;
  int32_t slot;
};

/// Calls f(piece) for every non-empty piece of partition `part` (bounds: cta_plan.cuh's partition_bounds), in order,
/// for kernels whose tiles hold 2^tile_shift tokens. Every role of a kernel walks the same pieces, so they agree on
/// the tile sequence.
template <bool kSparse, typename F>
__device__ __forceinline__ void for_each_piece(const DecodeParams& p, const PartitionBounds& bounds, int part,
                                               int tile_shift, F&& f) {
  const PartitionStart pstart = bounds.start, pend = bounds.end;
  for (int32_t r = pstart.req; r < p.batch && (r < pend.req || (r == pend.req && pend.tile > 0)); ++r) {
    const int32_t len = request_len<kSparse>(p.lens, r);
    const int32_t tiles = request_tiles(len, tile_shift);
    const int32_t t_begin = r == pstart.req ? pstart.tile : 0;
    const int32_t t_end = r == pend.req ? pend.tile : tiles;
    const int32_t slot = t_begin == 0 && t_end == tiles ? -1 : int32_t(partition_slot(part, r == pstart.req));
    if (t_end - t_begin > 0) f(Piece{r, len, t_begin, t_end - t_begin, slot});
  }
}

}  // namespace mlakit::cuda::decode
