#pragma once
// What both prefill kernel families (sm80/, sm90/) share on the device: the mapping of a CTA slot to its request
// and block of query rows (docs/design.md "Prefill on the GPU").
//
// Request r owns the CTA slots [start(r), start(r + 1)) of grid.x with start(r) = floor(cu_seqlens_q[r] / M) + r,
// M the rows of a block: at least ceil(Lq_r / M) slots (floor((c + L) / M) - floor(c / M) + 1 >= ceil(L / M)), so
// the grid is floor(T_q / M) + b slots, known on the host from shapes alone. A CTA finds its request by a search
// (block_of_slot) and exits when its block starts past Lq_r. Ranges are clamped to [0, T_q] and [0, T_k], so any
// cu_seqlens contents keep every access in bounds.

#include <cstdint>

#include "cuda/prefill/smxx/params.h"

namespace mlakit::cuda::prefill {

/// One CTA's work: rows [m0, m0 + kM) of request `req`'s queries (tokens q0 + m0 ...), over its keys k0 ...
struct Block {
  int32_t req;
  int64_t q0, lq, k0, lk, m0;
  /// Keys [0, kv_end) hold every key a row of the block sees (bottom-right causal: row i sees j <= i + lk - lq).
  __device__ int64_t kv_end(bool causal, int rows_per_block) const {
    return causal ? min(lk, max(m0 + rows_per_block + lk - lq, int64_t(0))) : lk;
  }
  /// Query rows of the block that exist (the last block of a request may be partial), for blocks of `rows_per_block`.
  __device__ int rows(int rows_per_block) const { return int(min(int64_t(rows_per_block), lq - m0)); }
  /// Keys row i of the request sees: [0, limit).
  __device__ int64_t limit(bool causal, int64_t i) const { return causal ? min(lk, max(i + lk - lq + 1, int64_t(0))) : lk; }
};

__device__ __forceinline__ int64_t clamped_cu(const int32_t* cu, int64_t stride, int32_t i, int64_t total) {
  return min(max(int64_t(cu[i * stride]), int64_t(0)), total);
}

/// The block of CTA slot `slot` (m0 >= lq: nothing to do). Every lane of a full warp must call it (it ballots).
///
/// The request is the largest r with floor(cu_q[r] / kM) + r <= slot, found 64 candidates at a time: each lane tests
/// two evenly spaced r of the current range and a ballot keeps the range after the last passing one, so a batch of up
/// to 64 takes one round of loads and one of up to 4096 two. A binary search took log2(batch) dependent rounds, each a
/// global load: ncu on 64 x 512 (batch 64, 6 rounds) put it at a fifth of the Hopper prefill's samples, before any
/// copy could start. For sorted cu_seqlens both find the same r; for any contents r stays in [0, batch).
template <int kM>
__device__ __forceinline__ Block block_of_slot(const PrefillParams& p, int64_t slot) {
  const int lane = int(threadIdx.x) % 32;
  const auto passes = [&](int32_t r) { return clamped_cu(p.cu_q, p.cu_q_stride, r, p.t_q) / kM + r <= slot; };
  int32_t lo = 0, n = p.batch;  // the answer is in [lo, lo + n); r = lo passes, except perhaps r = 0
  while (n > 1) {
    // Candidates lo + i * step, i < 64, cover the range. In 64-bit: with a batch near 2^31, n + 63 and the last
    // candidates (up to lo + n + 62) would overflow 32 bits and read before cu_seqlens_q.
    const int32_t step = n / 64 + (n % 64 != 0);
    const int64_t r0 = int64_t(lo) + int64_t(lane) * step, r1 = r0 + int64_t(32) * step;
    const uint32_t low = __ballot_sync(0xffffffffu, r0 < lo + n && passes(int32_t(r0)));
    const uint32_t high = __ballot_sync(0xffffffffu, r1 < lo + n && passes(int32_t(r1)));
    // The last passing candidate (none: only r = 0 can fail, and then the answer is 0, as the binary search's).
    const int32_t i = high != 0 ? 63 - __clz(high) : (low != 0 ? 31 - __clz(low) : 0);
    const int32_t end = lo + n;
    lo += i * step;
    n = min(step, end - lo);
  }
  Block b;
  b.req = lo;
  b.q0 = clamped_cu(p.cu_q, p.cu_q_stride, lo, p.t_q);
  b.lq = max(clamped_cu(p.cu_q, p.cu_q_stride, lo + 1, p.t_q) - b.q0, int64_t(0));
  b.k0 = clamped_cu(p.cu_k, p.cu_k_stride, lo, p.t_k);
  b.lk = max(clamped_cu(p.cu_k, p.cu_k_stride, lo + 1, p.t_k) - b.k0, int64_t(0));
  b.m0 = (slot - (b.q0 / kM + lo)) * kM;
  return b;
}

}  // namespace mlakit::cuda::prefill
