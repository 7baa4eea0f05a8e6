#pragma once
// How the Hopper decode producer fills a tile: one TMA copy, or row by row (cp.async, or the fp8 conversion). The
// producer picks the copy by this rule, and the consumers derive from it which tiles need a proxy fence before
// wgmma reads them; one function so that the two sides cannot disagree.

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

/// Whether the consumers fence the proxies after tile j's full barrier, before wgmma reads it: only for tiles
/// copied with cp.async (16-bit caches), whose writes complete asynchronously where no writing thread can fence
/// them. The fp8 producer converts rows with ordinary stores and fences them itself before it arrives (the writer's
/// fence, producer_fp8.cuh), and the peer's half of a CTA pair arrives by a bulk copy, through the async proxy.
template <KvKind kKind, bool kSparse>
__device__ __forceinline__ bool consumer_fences(bool use_tma, const Piece& pc, int32_t j) {
  return kKind == KvKind::k16Bit && tile_by_rows<kKind, kSparse>(use_tma, pc, j);
}

}  // namespace mlakit::cuda::decode::sm90
