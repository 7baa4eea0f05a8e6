#pragma once
// Addresses of the Hopper decode kernel's shared memory (config.h's SmemLayout) for one CTA.

#include <cstdint>

#include "cuda/decode/sm90/config.h"

namespace mlakit::cuda::decode::sm90 {

struct Smem {
  uint8_t* ptr;   // generic pointer of the 1024-byte aligned base
  uint32_t base;  // its shared-window address (what PTX instructions take)

  __device__ uint32_t q() const { return base + SmemLayout::q; }
  __device__ uint32_t stage(uint32_t s) const { return base + SmemLayout::stage0 + s * kTileBytes; }
  __device__ uint32_t p() const { return base + SmemLayout::p; }
  __device__ uint32_t full(uint32_t s, int part) const { return base + SmemLayout::full + (s * kParts + part) * 8; }
  __device__ uint32_t empty(uint32_t s, int part) const { return base + SmemLayout::empty + (s * kParts + part) * 8; }
  __device__ uint32_t q_full() const { return base + SmemLayout::q_full; }
  __device__ uint32_t q_empty() const { return base + SmemLayout::q_empty; }
  /// The rescale factors of the last tile's rows (S warpgroup to V warpgroup).
  __device__ float* alpha() const { return reinterpret_cast<float*>(ptr + SmemLayout::alpha); }
  /// Each row's output factor in the epilogue: kv_scale / row sum (times the sink factor), 0 for an empty row.
  __device__ float* o_scale() const { return reinterpret_cast<float*>(ptr + SmemLayout::o_scale); }
};

}  // namespace mlakit::cuda::decode::sm90
