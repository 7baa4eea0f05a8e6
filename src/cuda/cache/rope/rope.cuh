#pragma once
// Standalone RoPE in place (docs/spec.md section 7): x [T, H, d_r], one thread per rotation pair. Device code.
// Same rotation as the fused append (append/append_kv.cuh rope_rotate: double, rounded once to float, then
// to x's dtype), so both equal reference/rope_math.h bit for bit.
//
// Device-side guard: a token whose position lies outside [0, max_pos) is left unrotated; the table is never
// read outside its rows (the reference rejects such a call before touching x).

#include <cstdint>

#include "cuda/cache/append/append_kv.cuh"

namespace mlakit::cuda::cache {

inline constexpr int kRopeThreads = 256;

struct RopeParams {
  void* x;                 // [T, H, d_r] bf16|fp16|float32, rotated in place
  int64_t x_stride_t, x_stride_h;  // elements
  int64_t num_tokens;      // T
  int64_t num_heads;       // H
  int d_r;                 // even
  bool neox;
  const int64_t* positions;  // [T]
  int64_t positions_stride;
  const float* cos_sin;    // [max_pos, d_r]
  int64_t cos_sin_stride;
  int64_t max_pos;
};

template <class E>
__global__ void __launch_bounds__(kRopeThreads) rope_kernel(const RopeParams p) {
  const int half = p.d_r / 2;
  const int64_t pairs = p.num_tokens * p.num_heads * half;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t g = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; g < pairs; g += stride) {
    const int64_t th = g / half;
    const int i = int(g - th * half);
    const int64_t t = th / p.num_heads;
    const int64_t h = th - t * p.num_heads;
    const int64_t pos = p.positions[t * p.positions_stride];
    if (pos < 0 || pos >= p.max_pos) continue;
    const float* cs = p.cos_sin + pos * p.cos_sin_stride;
    auto* x = static_cast<typename E::Storage*>(p.x) + t * p.x_stride_t + h * p.x_stride_h;
    const int2 ab = rope_pair(i, p.d_r, p.neox);
    const float2 y = rope_rotate(E::to_float(x[ab.x]), E::to_float(x[ab.y]), cs[i], cs[half + i]);
    x[ab.x] = E::from_float(y.x);
    x[ab.y] = E::from_float(y.y);
  }
}

}  // namespace mlakit::cuda::cache
