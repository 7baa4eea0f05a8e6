// Combine (docs/spec.md section 6): merges the partial (O, LSE) of every request that the plan split across
// several partitions into out and lse. Four CTAs of 8 warps per output row; rows of unsplit requests were written
// by the decode kernel itself and are skipped. Launched with programmatic dependent launch on sm_90,
// so its CTAs are already resident when the decode kernel finishes.

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
constexpr int kColsPerLane = 4;                                  // one float4 per lane
constexpr int kColsPerCta = kWarpSize * kColsPerLane;            // 128 columns per CTA
constexpr int kColChunks = kDimV / kColsPerCta;                  // 4 CTAs per output row
static_assert(kColChunks * kColsPerCta == kDimV);

// Grid: (plan requests, rows x 4 column chunks): requests on x, whose limit is 2^31 - 1, because sparse
// prefill has up to 65,536 x 8 of them (y stops at 65,535). The warps of a CTA take every 8th split each, so a request split
// 264 ways (b = 1 spread over all SMs) needs 33 dependent steps per warp instead of 264.
template <bool kBf16>
__global__ void __launch_bounds__(kCombineWarps * kWarpSize) combine_kernel(const DecodeParams p) {
  __shared__ float4 partial[kCombineWarps][kWarpSize];
  pdl_wait();
  const int r = blockIdx.x;
  const RequestPlan rp = p.plan_requests[r];
  if (rp.num_splits <= 1) return;
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  const int m = blockIdx.y / kColChunks;
  const int chunk = blockIdx.y % kColChunks;
  const int n = rp.num_splits;
  const int64_t base = rp.split_base;

  float mx = -INFINITY;
  for (int s = lane; s < n; s += kWarpSize) mx = fmaxf(mx, p.part_lse[(base + s) * p.rows + m]);
  for (int d = 1; d < kWarpSize; d *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, d));
  const float m_use = mx == -INFINITY ? 0.0f : mx;  // every part empty: the sum below is 0
  float sum = 0.0f;
  for (int s = lane; s < n; s += kWarpSize) sum += expf(p.part_lse[(base + s) * p.rows + m] - m_use);
  for (int d = 1; d < kWarpSize; d *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, d);
  const bool empty = !(sum > 0.0f);
  const float lse = empty ? -INFINITY : m_use + logf(sum);

  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  if (!empty) {
    const float4* src = reinterpret_cast<const float4*>(p.part_out) + chunk * kWarpSize + lane;
#pragma unroll 4
    for (int s = warp; s < n; s += kCombineWarps) {
      const int64_t row = (base + s) * p.rows + m;
      const float w = expf(p.part_lse[row] - lse);
      const float4 v = src[row * (kDimV / kColsPerLane)];
      acc.x += w * v.x;
      acc.y += w * v.y;
      acc.z += w * v.z;
      acc.w += w * v.w;
    }
  }
  partial[warp][lane] = acc;
  __syncthreads();
  if (warp != 0) return;
  const int i = m / p.h_q;
  const int h = m % p.h_q;
  if (p.max_logits != nullptr && chunk == 0) {  // sparse decode's max_logits: the largest over the splits
    float ml = -INFINITY;
    for (int s = lane; s < n; s += kWarpSize) ml = fmaxf(ml, p.part_max[(base + s) * p.rows + m]);
    for (int d = 1; d < kWarpSize; d *= 2) ml = fmaxf(ml, __shfl_xor_sync(0xffffffffu, ml, d));
    if (lane == 0) {
      p.max_logits[request_offset<true>(p, r, p.max_logits_stride_b, p.max_logits_stride_s) +
                   int64_t(i) * p.max_logits_stride_s + int64_t(h) * p.max_logits_stride_h] = ml;
    }
  }
  for (int w = 1; w < kCombineWarps; ++w) {
    const float4 v = partial[w][lane];
    acc.x += v.x;
    acc.y += v.y;
    acc.z += v.z;
    acc.w += v.w;
  }
  if (!empty) {
    const float f = sink_factor(p, h, lse);
    acc.x *= f;
    acc.y *= f;
    acc.z *= f;
    acc.w *= f;
  }
  uint8_t* orow = static_cast<uint8_t*>(p.out) + (request_offset<true>(p, r, p.out_stride_b, p.out_stride_s) +
                                                  int64_t(i) * p.out_stride_s + int64_t(h) * p.out_stride_h) * 2;
  const int col = chunk * kColsPerCta + lane * kColsPerLane;
  uint2 v;
  v.x = pack_float2<kBf16>(acc.x, acc.y);
  v.y = pack_float2<kBf16>(acc.z, acc.w);
  *reinterpret_cast<uint2*>(orow + col * 2) = v;
  if (p.lse != nullptr && chunk == 0 && lane == 0)
    p.lse[request_offset<true>(p, r, p.lse_stride_b, p.lse_stride_s) + int64_t(i) * p.lse_stride_s +
          int64_t(h) * p.lse_stride_h] = lse;
}

}  // namespace

Status launch_combine(const DecodeParams& p, bool bf16, cudaStream_t stream, bool pdl) {
  PdlLaunch l(dim3(p.batch, p.rows * kColChunks), dim3(kCombineWarps * kWarpSize), 0, stream, pdl);
  if (bf16) {
    MLAKIT_CUDA_TRY(cudaLaunchKernelEx(&l.cfg, combine_kernel<true>, p));
  } else {
    MLAKIT_CUDA_TRY(cudaLaunchKernelEx(&l.cfg, combine_kernel<false>, p));
  }
  return {};
}

}  // namespace mlakit::cuda::decode
