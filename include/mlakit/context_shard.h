#pragma once
/// @file context_shard.h
/// Context parallelism (docs/spec.md section 11): which GPU of a group holds token t of a request. Each request's
/// tokens are dealt out round-robin in runs of `interleave` tokens, so rank r holds every token with
///     (t / interleave) % world == r
/// and keeps them in order: the k-th token it owns is its local token k, stored where the rank's own block table
/// puts it (row k % P of page block_table[b][k / P]). These functions are the one statement of that rule; the
/// host, the kernels and the tests all call them.

#include <cstdint>

#include "mlakit/numeric.h"  // MLAKIT_HOST_DEVICE

namespace mlakit {

/// Largest world x interleave: every quantity below stays in int64 arithmetic with room to spare.
inline constexpr int64_t kMaxShardCycle = int64_t(1) << 30;

struct ContextShard {
  int32_t world = 1;       ///< GPUs the request's tokens are spread over; 1 = not sharded
  int32_t rank = 0;        ///< this GPU's place in [0, world)
  int32_t interleave = 1;  ///< tokens per run: 1 deals single tokens, 64 whole runs of 64 (vLLM's DCP interleave)

  MLAKIT_HOST_DEVICE bool sharded() const { return world > 1; }
  /// Rank that holds global token t.
  MLAKIT_HOST_DEVICE int32_t owner(int64_t t) const { return int32_t((t / interleave) % world); }
  /// Local index of global token t on its owner.
  MLAKIT_HOST_DEVICE int64_t local_index(int64_t t) const {
    const int64_t cycle = int64_t(world) * interleave;
    return t / cycle * interleave + t % interleave;
  }
  /// Tokens among the global tokens [0, n) that this rank holds (0 for n <= 0): its local length when the
  /// request has n tokens, and the keys its shard shows a query that sees global tokens [0, n).
  MLAKIT_HOST_DEVICE int64_t owned_before(int64_t n) const {
    if (n <= 0) return 0;
    const int64_t cycle = int64_t(world) * interleave;
    const int64_t in_last = n % cycle - int64_t(rank) * interleave;  // tokens of the last, partial cycle
    return n / cycle * interleave + (in_last < 0 ? 0 : in_last > interleave ? interleave : in_last);
  }
  /// Cache slot (page * page_size + row) where this rank stores global token `pos` of a request whose block-table
  /// row is `table_row` (`columns` entries), or -1: another rank's token, pos < 0, or an entry past the row or
  /// negative (docs/spec.md section 11, the helpers).
  MLAKIT_HOST_DEVICE int64_t slot_of(int64_t pos, const int32_t* table_row, int64_t columns, int64_t page_size) const {
    if (pos < 0 || owner(pos) != rank) return -1;
    const int64_t k = local_index(pos);
    if (k / page_size >= columns) return -1;
    const int32_t page = table_row[k / page_size];
    return page < 0 ? -1 : int64_t(page) * page_size + k % page_size;
  }
};

/// The request holding new token j of a step: the last r in [0, b) with query_start_loc[r] <= j, or -1 when j lies
/// before query_start_loc[0] or at or past query_start_loc[b]. qsl[i] is query_start_loc[i * stride].
MLAKIT_HOST_DEVICE int64_t request_holding(const int32_t* qsl, int64_t stride, int64_t b, int64_t j) {
  if (b <= 0 || j < qsl[0] || j >= qsl[b * stride]) return -1;
  int64_t lo = 0, hi = b;  // qsl[lo] <= j < qsl[hi]
  while (hi - lo > 1) {
    const int64_t mid = (lo + hi) / 2;
    if (qsl[mid * stride] <= j) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

}  // namespace mlakit
