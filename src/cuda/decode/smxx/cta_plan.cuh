#pragma once
// Where a decode CTA finds the bounds of its partition, under each of the three schedules of DecodeParams (params.h):
// the whole-request schedule (computed), the plan kernel's (read from the workspace), or, for batches up to
// kCtaPlanMaxRequests, the CTA's own plan: every CTA reads the lengths and cuts the batch's work with the plan
// kernel's work model (plan.cu), then keeps its own partition. That saves the plan kernel's launch (host time) and
// its run before the decode CTAs may start (GPU time): each CTA spends a prefix sum over the batch instead.

#include <cstdint>

#include "cuda/decode/smxx/block_scan.cuh"
#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode {

/// Bytes of the static shared memory partition_bounds declares for a kThreads-thread kernel, for the kernels' budgets
/// (their dynamic shared memory comes on top of it).
template <int kThreads>
inline constexpr int kCtaPlanSmemBytes = int(sizeof(PartitionBounds)) + 8 * (kThreads / 32 + 1) + 8;

/// The bounds of partition `part`, in shared memory, for kernels of kThreads threads whose tiles hold 2^tile_shift
/// tokens. Every thread of the CTA must call it, with the same arguments (it synchronises the CTA), after pdl_wait
/// (the lengths may come from the previous kernel). `writes_plans`: under the CTA's own plan, this CTA (one per
/// partition) writes the RequestPlan of every request whose tile 0 the partition holds, which the combine reads.
template <bool kSparse, int kThreads>
__device__ const PartitionBounds* partition_bounds(const DecodeParams& p, int part, int tile_shift, bool writes_plans) {
  __shared__ PartitionBounds bounds;
  __shared__ int64_t scan[kThreads / 32 + 1];
  __shared__ int64_t end_cost;  // cost units before the partition's end request
  const int tid = int(threadIdx.x);
  if (p.whole_requests > 0) {
    if (tid == 0) {
      const int64_t r0 = int64_t(part) * p.whole_requests;
      bounds.start = PartitionStart{int32_t(min(r0, int64_t(p.batch))), 0};
      bounds.end = PartitionStart{int32_t(min(r0 + p.whole_requests, int64_t(p.batch))), 0};
    }
  } else if (p.cta_plan == 0) {
    if (tid == 0) bounds = PartitionBounds{p.plan_partitions[part], p.plan_partitions[part + 1]};
  } else {
    // The plan kernel's steps 1 and 2 (plan.cu) for two partition starts only: this one's and the next one's, or its
    // whole-request rule.
    const int64_t b = p.batch;
    const int64_t per = (b + kThreads - 1) / kThreads;
    const int64_t r0 = min(b, int64_t(tid) * per);
    const int64_t r1 = min(b, r0 + per);
    int64_t local = 0, local_max = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = request_cost<kSparse>(p.lens, int32_t(r), tile_shift);
      local += c;
      local_max = max(local_max, c);
    }
    int64_t total = 0;
    const int64_t before = block_exclusive_scan<kThreads>(local, scan, &total);
    const int64_t width = max((total + p.partitions - 1) / p.partitions, int64_t(kFixedCostTiles + 1));
    const int64_t whole = whole_requests_per_partition(b, p.partitions, block_max<kThreads>(local_max, scan), width);
    if (whole > 0 && tid == 0) {  // the plan kernel's rule too: whole requests, none split
      bounds.start = PartitionStart{int32_t(min(int64_t(part) * whole, b)), 0};
      bounds.end = PartitionStart{int32_t(min((int64_t(part) + 1) * whole, b)), 0};
    }
#pragma unroll 1
    for (int k = 0; k < 2 && whole == 0; ++k) {
      const int64_t unit = (int64_t(part) + k) * width;
      PartitionStart* s = k == 0 ? &bounds.start : &bounds.end;
      if (part + k >= p.partitions || unit >= total) {
        if (tid == 0) {
          *s = PartitionStart{int32_t(b), 0};
          if (k == 1) end_cost = total;
        }
      } else if (unit >= before && unit < before + local) {  // the request holding `unit` is among this thread's
        int64_t c = before;
        int64_t r = r0;
        for (int64_t cr = request_cost<kSparse>(p.lens, int32_t(r), tile_shift); c + cr <= unit;
             cr = request_cost<kSparse>(p.lens, int32_t(r), tile_shift)) {
          c += cr;
          ++r;
        }
        const int64_t into = unit - c - kFixedCostTiles;  // a start in the fixed-cost units starts at tile 0
        *s = PartitionStart{int32_t(r), int32_t(into > 0 ? into : 0)};
        if (k == 1) end_cost = c;
      }
    }
    __syncthreads();
    if (writes_plans) {
      // Requests whose tile 0 lies in [start, end): all but the last go wholly to this partition; the last goes on
      // into the next one when the end is inside it (end.tile > 0), as the plan kernel's step 3 finds. (Whole
      // requests: none goes on.)
      const PartitionStart s = bounds.start, e = bounds.end;
      const int64_t first = s.tile == 0 ? s.req : int64_t(s.req) + 1;
      const bool goes_on = e.tile > 0;
      const int64_t last = goes_on ? int64_t(e.req) + 1 : int64_t(e.req);
      for (int64_t r = first + tid; r < last; r += kThreads) {
        RequestPlan rp{part, 1, int32_t(partition_slot(part, true)), 0};
        if (goes_on && r == e.req) {
          const int64_t tile0 = end_cost + kFixedCostTiles;  // the unit of its tile 0
          const int64_t tiles = request_tiles(request_len<kSparse>(p.lens, int32_t(r)), tile_shift);
          rp.num_splits = int32_t((tile0 + tiles - 1) / width - part + 1);
          rp.split_base = int32_t(partition_slot(part, r == s.req));
        }
        p.plan_requests[r] = rp;
      }
    }
  }
  __syncthreads();
  return &bounds;
}

}  // namespace mlakit::cuda::decode
