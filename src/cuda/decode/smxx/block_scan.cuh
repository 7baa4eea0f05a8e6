#pragma once
// A CTA-wide exclusive prefix sum and maximum, for the two places that plan split-KV work on the device: the plan
// kernel (plan.cu) and the decode CTAs that plan their own partition (cta_plan.cuh).

#include <cstdint>

namespace mlakit::cuda::decode {

/// Exclusive prefix sum of v over the kThreads threads of the CTA, in thread order; sets *total. Every thread of the
/// CTA must call it (it synchronises the CTA). `smem`: kThreads / 32 + 1 values of scratch, free again on return.
template <int kThreads>
__device__ int64_t block_exclusive_scan(int64_t v, int64_t* smem, int64_t* total) {
  constexpr int kWarpSize = 32;
  constexpr int kWarps = kThreads / kWarpSize;
  static_assert(kThreads % kWarpSize == 0 && kWarps <= kWarpSize, "one warp scans the warp totals");
  const int lane = threadIdx.x % kWarpSize;
  const int warp = threadIdx.x / kWarpSize;
  int64_t inc = v;
  for (int d = 1; d < kWarpSize; d *= 2) {
    const int64_t o = __shfl_up_sync(0xffffffffu, inc, d);
    if (lane >= d) inc += o;
  }
  if (lane == kWarpSize - 1) smem[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int64_t w = lane < kWarps ? smem[lane] : 0;
    for (int d = 1; d < kWarpSize; d *= 2) {
      const int64_t o = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += o;
    }
    if (lane < kWarps) smem[lane] = w;  // inclusive prefix of warp totals
    if (lane == kWarps - 1) smem[kWarps] = w;
  }
  __syncthreads();
  const int64_t warp_base = warp > 0 ? smem[warp - 1] : 0;
  *total = smem[kWarps];
  __syncthreads();  // smem may be reused as soon as this returns
  return warp_base + inc - v;
}

/// The largest v over the kThreads threads of the CTA; every thread gets it. Every thread of the CTA must call it (it
/// synchronises the CTA). `smem`: kThreads / 32 values of scratch, free again on return.
template <int kThreads>
__device__ int64_t block_max(int64_t v, int64_t* smem) {
  constexpr int kWarpSize = 32;
  constexpr int kWarps = kThreads / kWarpSize;
  static_assert(kThreads % kWarpSize == 0 && kWarps <= kWarpSize, "one warp reduces the warp maxima");
  for (int d = 1; d < kWarpSize; d *= 2) v = max(v, __shfl_xor_sync(0xffffffffu, v, d));
  if (threadIdx.x % kWarpSize == 0) smem[threadIdx.x / kWarpSize] = v;
  __syncthreads();
  int64_t m = smem[0];
  for (int w = 1; w < kWarps; ++w) m = max(m, smem[w]);
  __syncthreads();  // smem may be reused as soon as this returns
  return m;
}

}  // namespace mlakit::cuda::decode
