// The split-KV plan (issue 3, docs/spec.md section 9): one CTA reads seq_lens on the device and cuts the
// batch's KV work into G equal partitions, one per decode CTA column, writing the schedule into the
// caller's workspace. No host synchronisation, so plan + run can be captured in a CUDA graph.
//
// Work model: request r costs request_tiles(L_r) + kFixedCostTiles units. The units of all requests are
// laid end to end ([cost[r], cost[r + 1]) for request r); partition g starts at unit g * W with
// W = max(ceil(C / G), kFixedCostTiles + 1). A start that falls in the fixed-cost units of request r
// starts at tile 0 of r. Because W exceeds the fixed cost, two partitions never start at the same
// (req, tile), so every partition that starts before unit C is non-empty (those past it are empty, as are those
// from ceil(b / k) on under the whole-request rule below) and the partitions sharing a request are consecutive:
// the one holding tile 0 of r is g0 = (cost[r] + kFixedCostTiles) / W and the split index of
// partition g in request r is g - g0.
//
// Where k = ceil(b / G) whole requests per partition keep the busiest one within kSplitCostTiles units of W
// (whole_requests_per_partition: uniform lengths, mostly), partition g takes requests [g k, g k + k) whole instead,
// and no request is split.
//
// Decode CTAs plan their own partition the same way when the batch is small (cta_plan.cuh); this kernel serves the
// larger ones (kCtaPlanMaxRequests), and only then do the kernels read its partition starts.

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/ptx.cuh"
#include "cuda/decode/smxx/block_scan.cuh"
#include "cuda/decode/smxx/launch.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode {
namespace {

__global__ void __launch_bounds__(kPlanThreads) plan_kernel(PlanParams p) {
  __shared__ int64_t scan_smem[kPlanThreads / 32 + 1];
  pdl_wait();  // seq_lens may come from the previous kernel
  // Let the decode kernel's CTAs launch now: they become resident while this runs and stop in their
  // own pdl_wait until this grid has finished and its writes are visible, which hides the decode
  // launch latency (a few microseconds of b = 1's ~0.1 ms) behind the plan.
  pdl_launch_dependents();
  const int64_t b = p.batch;
  const int64_t per = (b + kPlanThreads - 1) / kPlanThreads;
  const int64_t r0 = min(b, int64_t(threadIdx.x) * per);
  const int64_t r1 = min(b, r0 + per);

  // 1. cost prefix sums (request_len's general form: it serves dense decode too, with fold 1 and no cap), and the
  // largest cost.
  int64_t local = 0, local_max = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t c = request_cost</*kSparse=*/true>(p.lens, int32_t(r), p.tile_shift);
    local += c;
    local_max = max(local_max, c);
  }
  const int64_t cost_max = block_max<kPlanThreads>(local_max, scan_smem);
  int64_t total_cost = 0;
  int64_t run = block_exclusive_scan<kPlanThreads>(local, scan_smem, &total_cost);
  for (int64_t r = r0; r < r1; ++r) {
    p.cost_scratch[r] = run;
    run += request_cost</*kSparse=*/true>(p.lens, int32_t(r), p.tile_shift);
  }
  if (threadIdx.x == 0) p.cost_scratch[b] = total_cost;
  __syncthreads();  // cost_scratch (global) is read by every thread below

  const int64_t g_count = p.partitions;
  const int64_t width = max((total_cost + g_count - 1) / g_count, int64_t(kFixedCostTiles + 1));
  // Whole requests, `whole` per partition and none split, where splitting would save less than it costs.
  const int64_t whole = whole_requests_per_partition(b, g_count, cost_max, width);

  // 2. partition starts: binary search of the request holding unit g * W (or the whole-request rule's).
  for (int64_t g = threadIdx.x; g <= g_count; g += kPlanThreads) {
    const int64_t unit = g * width;
    PartitionStart s{int32_t(b), 0};
    if (whole > 0) {
      s = PartitionStart{int32_t(min(g * whole, b)), 0};
    } else if (g < g_count && unit < total_cost) {
      int64_t lo = 0, hi = b - 1;  // largest r with cost[r] <= unit
      while (lo < hi) {
        const int64_t mid = (lo + hi + 1) / 2;
        if (p.cost_scratch[mid] <= unit) lo = mid; else hi = mid - 1;
      }
      const int64_t into = unit - p.cost_scratch[lo] - kFixedCostTiles;
      s = PartitionStart{int32_t(lo), int32_t(into > 0 ? into : 0)};
    }
    p.partitions_out[g] = s;
  }

  // 3. per request: first partition, number of splits, and the partial slot of its first part (split_slot).
  for (int64_t r = r0; r < r1; ++r) {
    if (whole > 0) {
      p.requests_out[r] = RequestPlan{int32_t(r / whole), 1, int32_t(partition_slot(r / whole, true)), 0};
      continue;
    }
    const int64_t c = p.cost_scratch[r];
    const int64_t tiles = p.cost_scratch[r + 1] - c - kFixedCostTiles;
    const int64_t g0 = (c + kFixedCostTiles) / width;
    const int64_t n = (c + kFixedCostTiles + tiles - 1) / width - g0 + 1;
    // Partition g0 starts inside an earlier request when g0 W < c: then r is its last request, not its first.
    p.requests_out[r] = RequestPlan{int32_t(g0), int32_t(n), int32_t(partition_slot(g0, g0 * width >= c)), 0};
  }
}

}  // namespace

Status launch_plan(const PlanParams& p, cudaStream_t stream, bool pdl) {
  PdlLaunch l(dim3(1), dim3(kPlanThreads), 0, stream, pdl);
  MLAKIT_CUDA_TRY(cudaLaunchKernelEx(&l.cfg, plan_kernel, p));
  return {};
}

}  // namespace mlakit::cuda::decode
