// Combine (docs/spec.md section 6): merges the partial (O, LSE) of every request that the plan split across
// several partitions into out and lse; rows of unsplit requests were written
// by the decode kernel itself and are skipped. Two kernels, chosen by the plan's shape (combine_launch). Launched with
// programmatic dependent launch on sm_90, so its CTAs are already resident when the decode kernel finishes.

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/ptx.cuh"
#include "cuda/decode/smxx/launch.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode {
namespace {

constexpr int kWarpSize = 32;
constexpr int64_t kFewSplitsPerRequest = 8;  // partitions per plan request up to which combine_rows_kernel runs
constexpr int kColsPerLane = 4;                                  // one float4 per lane and load
constexpr int kColsPerCta = kWarpSize * kColsPerLane;            // 128 columns per CTA (many-split kernel)
constexpr int kColChunks = kDimV / kColsPerCta;                  // 4 CTAs per output row (many-split kernel)
static_assert(kColChunks * kColsPerCta == kDimV);
constexpr int kMaxSplits = 1024;  // splits per request the many-split kernel takes (their weights: 4 KB of smem)
constexpr int kInFlight = 8;      // partial-row loads a warp of the many-split kernel has in flight

/// The merged LSE of row m of a request split n ways (its slots: split_slot) (docs/spec.md section 6), computed by one
/// warp: every lane ends with it. `empty`: every part saw no key (lse = -inf, out = 0).
__device__ __forceinline__ float merged_lse(const DecodeParams& p, const RequestPlan& rp, int n, int m, int lane,
                                            bool* empty) {
  float mx = -INFINITY;
  for (int s = lane; s < n; s += kWarpSize) mx = fmaxf(mx, p.part_lse[split_slot(rp, s) * p.rows + m]);
  for (int d = 1; d < kWarpSize; d *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
  const float m_use = mx == -INFINITY ? 0.0f : mx;  // every part empty: the sum below is 0
  float sum = 0.0f;
  for (int s = lane; s < n; s += kWarpSize) sum += expf(p.part_lse[split_slot(rp, s) * p.rows + m] - m_use);
  for (int d = 1; d < kWarpSize; d *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  *empty = !(sum > 0.0f);
  return *empty ? -INFINITY : m_use + logf(sum);
}

/// Writes columns [col, col + 4) of output row m of plan request r: acc scaled by the sink factor, in q's dtype.
template <bool kBf16>
__device__ __forceinline__ void store_out4(const DecodeParams& p, int r, int m, int col, float4 acc, float scale) {
  const int i = m / p.h_q;
  const int h = m % p.h_q;
  uint8_t* orow = static_cast<uint8_t*>(p.out) + (request_offset<true>(p, r, p.out_stride_b, p.out_stride_s) +
                                                  int64_t(i) * p.out_stride_s + int64_t(h) * p.out_stride_h) * 2;
  uint2 v;
  v.x = pack_float2<kBf16>(acc.x * scale, acc.y * scale);
  v.y = pack_float2<kBf16>(acc.z * scale, acc.w * scale);
  *reinterpret_cast<uint2*>(orow + col * 2) = v;
}

/// lse and, for sparse decode, max_logits of output row m of plan request r; called by lane 0 of one warp per row,
/// after the warp computed the largest partial max (`ml`).
__device__ __forceinline__ void store_row_stats(const DecodeParams& p, int r, int m, float lse, float ml) {
  const int i = m / p.h_q;
  const int h = m % p.h_q;
  if (p.max_logits != nullptr) {
    p.max_logits[request_offset<true>(p, r, p.max_logits_stride_b, p.max_logits_stride_s) +
                 int64_t(i) * p.max_logits_stride_s + int64_t(h) * p.max_logits_stride_h] = ml;
  }
  if (p.lse != nullptr) {
    p.lse[request_offset<true>(p, r, p.lse_stride_b, p.lse_stride_s) + int64_t(i) * p.lse_stride_s +
          int64_t(h) * p.lse_stride_h] = lse;
  }
}

/// The largest partial max logit of row m (sparse decode's max_logits), reduced over the warp; -inf without it.
__device__ __forceinline__ float merged_max(const DecodeParams& p, const RequestPlan& rp, int n, int m, int lane) {
  float ml = -INFINITY;
  if (p.max_logits == nullptr) return ml;
  for (int s = lane; s < n; s += kWarpSize) ml = fmaxf(ml, p.part_max[split_slot(rp, s) * p.rows + m]);
  for (int d = 1; d < kWarpSize; d *= 2) ml = fmaxf(ml, __shfl_xor_sync(0xffffffffu, ml, d));
  return ml;
}

// The few-split kernel, for plans with few partitions per request (a request then spans few of them): one warp
// per output row, each lane 16 of its 512 columns (four float4 per split, each load 512 contiguous bytes across the
// warp). Grid: (plan requests, ceil(rows / 8)). Before it, four CTAs of 8 warps per row handled 128 columns each,
// with 6 of the 8 warps idle on a request split in two: 95 us of 0.44 ms at b=128, h=128 (docs/performance.md).
template <bool kBf16>
__global__ void __launch_bounds__(kCombineWarps * kWarpSize) combine_rows_kernel(const DecodeParams p) {
  constexpr int kLoads = kDimV / (kWarpSize * kColsPerLane);  // 4 float4 per lane
  pdl_wait();
  const int r = blockIdx.x;
  const RequestPlan rp = p.plan_requests[r];
  const int lane = threadIdx.x % kWarpSize;
  const int m = blockIdx.y * kCombineWarps + threadIdx.x / kWarpSize;
  if (rp.num_splits <= 1 || m >= p.rows) return;
  const int n = rp.num_splits;
  bool empty = false;
  const float lse = merged_lse(p, rp, n, m, lane, &empty);
  float4 acc[kLoads];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) acc[k] = make_float4(0.f, 0.f, 0.f, 0.f);
  if (!empty) {
    const float4* src = reinterpret_cast<const float4*>(p.part_out) + lane;
#pragma unroll 2
    for (int s = 0; s < n; ++s) {
      const int64_t row = split_slot(rp, s) * p.rows + m;
      const float w = expf(p.part_lse[row] - lse);
      const float4* v = src + row * (kDimV / kColsPerLane);
#pragma unroll
      for (int k = 0; k < kLoads; ++k) {
        const float4 x = v[k * kWarpSize];
        acc[k].x += w * x.x;
        acc[k].y += w * x.y;
        acc[k].z += w * x.z;
        acc[k].w += w * x.w;
      }
    }
  }
  const float f = empty ? 1.0f : sink_factor(p, m % p.h_q, lse);
#pragma unroll
  for (int k = 0; k < kLoads; ++k) store_out4<kBf16>(p, r, m, (k * kWarpSize + lane) * kColsPerLane, acc[k], f);
  const float ml = merged_max(p, rp, n, m, lane);
  if (lane == 0) store_row_stats(p, r, m, lse, ml);
}

// The many-split kernel (more partitions than requests: a long request spread over many SMs, up to 264 ways): four
// CTAs of 8 warps per output row, 128 columns each. Grid: (plan requests, rows x 4 column chunks): requests on x,
// whose limit is 2^31 - 1, because sparse prefill has up to 65,536 x 8 of them (y stops at 65,535).
// Latency, not bandwidth, sets its time (b1 L131072 h16: 64 CTAs, 8.6 MB of partials, 11.9 us under ncu when each
// warp walked the partial LSEs twice and then its 33 splits about two loads at a time), so the CTA first reads every
// split's partial LSE at once (one load per thread), reduces them across the block and keeps each split's weight in
// shared memory (up to kMaxSplits splits: combine_launch sends larger plans to the few-split kernel); then each warp
// takes every 8th split with kInFlight partial-row loads issued before their first use.
template <bool kBf16>
__global__ void __launch_bounds__(kCombineWarps * kWarpSize) combine_kernel(const DecodeParams p) {
  constexpr int kThreads = kCombineWarps * kWarpSize;
  __shared__ float4 partial[kCombineWarps][kWarpSize];
  __shared__ float weight[kMaxSplits];  // split s: its partial LSE, then exp(lse_s - lse)
  __shared__ float reduce[kCombineWarps];
  pdl_wait();
  const int r = blockIdx.x;
  const RequestPlan rp = p.plan_requests[r];
  if (rp.num_splits <= 1) return;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int m = blockIdx.y / kColChunks;
  const int chunk = blockIdx.y % kColChunks;
  const int n = rp.num_splits;

  // The merged LSE (docs/spec.md section 6), block-wide: the largest partial, then the sum of exponentials.
  float mx = -INFINITY;
  for (int s = threadIdx.x; s < n; s += kThreads) {
    weight[s] = p.part_lse[split_slot(rp, s) * p.rows + m];
    mx = fmaxf(mx, weight[s]);
  }
  for (int d = 1; d < kWarpSize; d *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
  if (lane == 0) reduce[warp] = mx;
  __syncthreads();
  mx = reduce[0];
  for (int w = 1; w < kCombineWarps; ++w) mx = fmaxf(mx, reduce[w]);
  const float m_use = mx == -INFINITY ? 0.0f : mx;  // every part empty: the sum below is 0
  float sum = 0.0f;
  for (int s = threadIdx.x; s < n; s += kThreads) sum += expf(weight[s] - m_use);
  for (int d = 1; d < kWarpSize; d *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  __syncthreads();  // every warp has read the maxima from reduce[] before it takes the sums
  if (lane == 0) reduce[warp] = sum;
  __syncthreads();
  sum = 0.0f;
  for (int w = 0; w < kCombineWarps; ++w) sum += reduce[w];
  const bool empty = !(sum > 0.0f);
  const float lse = empty ? -INFINITY : m_use + logf(sum);
  if (!empty) {
    for (int s = threadIdx.x; s < n; s += kThreads) weight[s] = expf(weight[s] - lse);
  }
  __syncthreads();

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (!empty) {
    const float4* src = reinterpret_cast<const float4*>(p.part_out) + chunk * kWarpSize + lane;
    for (int s0 = warp; s0 < n; s0 += kInFlight * kCombineWarps) {
      float4 v[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) {
        const int s = s0 + k * kCombineWarps;
        v[k] = s < n ? src[(split_slot(rp, s) * p.rows + m) * (kDimV / kColsPerLane)] : make_float4(0.f, 0.f, 0.f, 0.f);
      }
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) {
        const int s = s0 + k * kCombineWarps;
        if (s >= n) break;
        acc.x += weight[s] * v[k].x;
        acc.y += weight[s] * v[k].y;
        acc.z += weight[s] * v[k].z;
        acc.w += weight[s] * v[k].w;
      }
    }
  }
  partial[warp][lane] = acc;
  __syncthreads();
  if (warp != 0) return;
  for (int w = 1; w < kCombineWarps; ++w) {
    const float4 v = partial[w][lane];
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  const float f = empty ? 1.0f : sink_factor(p, m % p.h_q, lse);
  store_out4<kBf16>(p, r, m, chunk * kColsPerCta + lane * kColsPerLane, acc, f);
  if (chunk != 0) return;
  const float ml = merged_max(p, rp, n, m, lane);
  if (lane == 0) store_row_stats(p, r, m, lse, ml);
}

}  // namespace

bool combine_launch(const DecodeParams& p, bool bf16, bool pdl, KernelLaunch* out) {
  if (p.whole_requests > 0) return false;  // nothing was split: the decode kernel wrote every row
  KernelLaunch& l = *out;
  l.block = dim3(kCombineWarps * kWarpSize);
  l.smem = 0;
  l.pdl = pdl;
  // Which kernel: the split counts live on the device, but a request spans about partitions / requests + 1 of them on
  // average, so up to 8 partitions per request the few-split kernel's loop stays short (a skewed batch can still give
  // one request many: the few-split kernel then serves it with a longer loop; correct either way).
  // A request spans at most `partitions` partitions; past kMaxSplits (more than any GPU of today has SMs) the
  // few-split kernel serves any count.
  if (p.partitions <= kFewSplitsPerRequest * int64_t(p.batch) || p.partitions > kMaxSplits) {
    set_kernel(l, bf16 ? combine_rows_kernel<true> : combine_rows_kernel<false>, &p);
    l.grid = dim3(p.batch, (p.rows + kCombineWarps - 1) / kCombineWarps);
  } else {
    set_kernel(l, bf16 ? combine_kernel<true> : combine_kernel<false>, &p);
    l.grid = dim3(p.batch, p.rows * kColChunks);
  }
  return true;
}

}  // namespace mlakit::cuda::decode
