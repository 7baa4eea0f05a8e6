#pragma once
// How the Hopper decode producer fills a tile: one TMA copy, or row by row (cp.async, or the fp8 conversion). The
// producer picks the copy by this rule, and the consumers use it to know which tiles arrived through the generic
// proxy and need a proxy fence before wgmma reads them; one function so that the two sides cannot disagree.

#include <cstdint>

#include "cuda/decode/sm90/config.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode::sm90 {

/// Whether tile j of a piece is written row by row: every sparse tile (gathered rows; the host never asks for TMA
/// there), every fp8 tile (converted by the producer), every tile when the host gave no tensor map, and a partial
/// last tile (TMA would bring rows past the request).
template <KvKind kKind, bool kSparse>
__device__ __forceinline__ bool tile_by_rows(bool use_tma, const Piece& pc, int32_t j) {
  return kSparse || kKind != KvKind::k16Bit || !use_tma || int64_t(pc.t_begin + j + 1) * kBlockN > pc.len;
}

}  // namespace mlakit::cuda::decode::sm90
