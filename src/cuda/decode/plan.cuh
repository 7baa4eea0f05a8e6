#pragma once
// Device helpers shared by the plan and decode kernels: how many KV tiles a request has. Both kernels
// must agree on this to the tile, so it lives in one place.

#include <cstdint>

#include "cuda/decode/config.h"

namespace mlakit::cuda::decode {

/// KV tiles of a request of length L. A request with L = 0 still gets one (empty) tile, so that some
/// CTA writes its out = 0 and lse = -inf (SPEC.md section 1) through the ordinary path.
__host__ __device__ inline int32_t request_tiles(int32_t len) {
  const int32_t l = len > 0 ? len : 0;
  const int32_t t = (l + kBlockN - 1) / kBlockN;
  return t > 0 ? t : 1;
}

__device__ inline int32_t load_seq_len(const int32_t* seq_lens, int64_t stride, int64_t r) {
  const int32_t l = seq_lens[r * stride];
  return l > 0 ? l : 0;
}

}  // namespace mlakit::cuda::decode
