#pragma once
// Merging partial attention states (docs/spec.md section 6), two-way and N-way. Device code only.
//
// One warp per row: the lanes read the n part LSEs in parallel (lane s, s + 32, ...) and reduce max and
// sum over the warp, then each lane combines 4 consecutive elements at a time across all parts
// (16-byte float32 / 8-byte bf16 loads). Weights and sums are in double, like reference/merge.cpp, so
// the two agree to about one float rounding of the output. A part with L_s = -inf (or a weight that
// underflows to 0) is never read, so whatever its O_s holds cannot leak into the result; when every part
// is -inf the row gets O = 0 and L = -inf.
//
// In place: each element of `out` is written by the lane that read it from every part, after those reads,
// and `lse` is written after a warp barrier that follows every read of the part LSEs, so out/lse may alias
// part 0 (or any part) exactly.

#include <cstdint>

#include "cuda/cache/common/elements.cuh"

namespace mlakit::cuda::cache {

inline constexpr int kMergeWarpsPerBlock = 8;
inline constexpr int kMergeThreads = kMergeWarpsPerBlock * kWarpSize;
inline constexpr int kMergeVec = 4;  // elements per lane per step

/// N parts stacked in one tensor: parts_out [n, rows, d], parts_lse [n, rows].
struct StackedParts {
  const void* out;
  int64_t out_stride_part, out_stride_row;  // elements
  const float* lse;
  int64_t lse_stride_part, lse_stride_row;
  int64_t n;
  __device__ int64_t count() const { return n; }
  __device__ const void* out_row(int64_t s, int64_t r, int elem_bytes) const {
    return static_cast<const char*>(out) + (s * out_stride_part + r * out_stride_row) * elem_bytes;
  }
  __device__ float lse_of(int64_t s, int64_t r) const { return lse[s * lse_stride_part + r * lse_stride_row]; }
};

/// Two separate parts (MergePairProblem). Selected with ?: rather than indexed, so the parameter arrays
/// stay in registers (a run-time index would copy them to local memory).
struct PairParts {
  const void* out[2];
  int64_t out_stride_row[2];  // elements
  const float* lse[2];
  int64_t lse_stride_row[2];
  __device__ int64_t count() const { return 2; }
  __device__ const void* out_row(int64_t s, int64_t r, int elem_bytes) const {
    const bool b = s != 0;
    return static_cast<const char*>(b ? out[1] : out[0]) + r * (b ? out_stride_row[1] : out_stride_row[0]) * elem_bytes;
  }
  __device__ float lse_of(int64_t s, int64_t r) const {
    return s != 0 ? lse[1][r * lse_stride_row[1]] : lse[0][r * lse_stride_row[0]];
  }
};

struct MergeOut {
  void* out;               // [rows, d]
  int64_t out_stride_row;  // elements
  float* lse;              // optional [rows]
  int64_t lse_stride_row;
  int64_t rows;
  int64_t d;               // multiple of kMergeVec
};

template <class E>
__device__ __forceinline__ void load4(const void* p, float (&v)[kMergeVec]) {
  if constexpr (sizeof(typename E::Storage) == 4) {
    const float4 f = *static_cast<const float4*>(p);
    v[0] = f.x, v[1] = f.y, v[2] = f.z, v[3] = f.w;
  } else {
    const uint2 u = *static_cast<const uint2*>(p);
    v[0] = E::to_float(uint16_t(u.x & 0xffffu)), v[1] = E::to_float(uint16_t(u.x >> 16));
    v[2] = E::to_float(uint16_t(u.y & 0xffffu)), v[3] = E::to_float(uint16_t(u.y >> 16));
  }
}

template <class E>
__device__ __forceinline__ void store4(void* p, const float (&v)[kMergeVec]) {
  if constexpr (sizeof(typename E::Storage) == 4) {
    *static_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    *static_cast<uint2*>(p) = make_uint2(uint32_t(E::from_float(v[0])) | (uint32_t(E::from_float(v[1])) << 16),
                                         uint32_t(E::from_float(v[2])) | (uint32_t(E::from_float(v[3])) << 16));
  }
}

__device__ __forceinline__ double warp_max(double v) {
#pragma unroll
  for (int o = kWarpSize / 2; o >= 1; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
#pragma unroll
  for (int o = kWarpSize / 2; o >= 1; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <class Parts, class In, class Out>
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const Parts parts, const MergeOut o) {
  const int lane = threadIdx.x % kWarpSize;
  const int64_t r = int64_t(blockIdx.x) * kMergeWarpsPerBlock + threadIdx.x / kWarpSize;
  if (r >= o.rows) return;
  const int64_t n = parts.count();
  const double neg_inf = -__longlong_as_double(0x7ff0000000000000LL);

  double max_lse = neg_inf;
  for (int64_t s = lane; s < n; s += kWarpSize) max_lse = fmax(max_lse, double(parts.lse_of(s, r)));
  max_lse = warp_max(max_lse);
  double merged = neg_inf;
  if (max_lse != neg_inf) {
    double sum = 0.0;
    for (int64_t s = lane; s < n; s += kWarpSize) sum += exp(double(parts.lse_of(s, r)) - max_lse);
    merged = max_lse + log(warp_sum(sum));
  }

  // exp(L_s - L), 0 for an empty part. Lane s keeps the weight of part s (< 32) for the whole row, so a
  // double exp is paid once per part and row, not once per part and 4-element step.
  const auto part_weight = [&](int64_t s) {
    const double l = parts.lse_of(s, r);
    return l == neg_inf ? 0.0 : exp(l - merged);
  };
  const double lane_weight = (merged != neg_inf && lane < n) ? part_weight(lane) : 0.0;

  constexpr int kInBytes = int(sizeof(typename In::Storage));
  constexpr int kOutBytes = int(sizeof(typename Out::Storage));
  char* out_row = static_cast<char*>(o.out) + r * o.out_stride_row * kOutBytes;
  // The step loop is warp-uniform (the shuffles need every lane); lanes past d skip loads and stores.
  for (int64_t base = 0; base < o.d; base += int64_t(kWarpSize) * kMergeVec) {
    const int64_t c = base + int64_t(lane) * kMergeVec;
    const bool active = c < o.d;
    double acc[kMergeVec] = {0.0, 0.0, 0.0, 0.0};
    if (merged != neg_inf) {
      for (int64_t s = 0; s < n; ++s) {
        const double w = s < kWarpSize ? __shfl_sync(0xffffffffu, lane_weight, int(s)) : part_weight(s);
        if (w == 0.0 || !active) continue;
        float v[kMergeVec];
        load4<In>(static_cast<const char*>(parts.out_row(s, r, kInBytes)) + c * kInBytes, v);
#pragma unroll
        for (int e = 0; e < kMergeVec; ++e) acc[e] += w * double(v[e]);
      }
    }
    if (!active) continue;
    float res[kMergeVec];
#pragma unroll
    for (int e = 0; e < kMergeVec; ++e) res[e] = float(acc[e]);
    store4<Out>(out_row + c * kOutBytes, res);
  }
  __syncwarp();  // every lane has read every part LSE of this row before lane 0 may overwrite one (in place)
  if (o.lse != nullptr && lane == 0) o.lse[r * o.lse_stride_row] = float(merged);
}

}  // namespace mlakit::cuda::cache
