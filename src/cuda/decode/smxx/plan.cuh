#pragma once
// Device helpers shared by the plan and every decode kernel family: how many KV tiles a request has. The
// plan and the kernel it schedules must agree on this to the tile, so it lives in one place.

#include <cstdint>

#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"

namespace mlakit::cuda::decode {

/// KV tiles of 2^tile_shift tokens of a request of length L. A request with L = 0 still gets one (empty)
/// tile, so that some CTA writes its out = 0 and lse = -inf (docs/spec.md section 1) through the ordinary path.
__host__ __device__ inline int32_t request_tiles(int32_t len, int tile_shift) {
  const int32_t l = len > 0 ? len : 0;
  const int32_t t = int32_t((int64_t(l) + (int64_t(1) << tile_shift) - 1) >> tile_shift);
  return t > 0 ? t : 1;
}

/// KV length of plan request r (RequestLengths), in [0, cap].
__device__ inline int32_t request_len(const RequestLengths& l, int64_t r) {
  if (l.lens == nullptr) return l.cap;
  const int32_t v = l.lens[(r / l.fold) * l.stride];
  return v < 0 ? 0 : v > l.cap ? l.cap : v;
}

/// Element offset of plan request r in a [b, s_q, ...] tensor with batch stride sb and token stride ss: request
/// r is batch entry r in dense decode (fold 1) and query token (r / s_q, r % s_q) in sparse decode (fold s_q).
__device__ inline int64_t request_offset(const DecodeParams& p, int64_t r, int64_t sb, int64_t ss) {
  return (r / p.lens.fold) * sb + (r % p.lens.fold) * ss;
}

/// The attention sink's factor 1 / (1 + exp(sink_h - lse)) of a non-empty row (docs/spec.md section 2): 1 without a
/// sink or for sink = -inf, 0 for sink = +inf. lse is in natural log.
__device__ inline float sink_factor(const DecodeParams& p, int h, float lse) {
  if (p.attn_sink == nullptr) return 1.0f;
  return 1.0f / (1.0f + expf(p.attn_sink[h] - lse));
}

/// One piece of a partition's KV work: tiles [t_begin, t_begin + n_tiles) of request `req` (length len).
struct Piece {
  int32_t req;
  int32_t len;
  int32_t t_begin;
  int32_t n_tiles;
};

/// Calls f(piece) for every non-empty piece of partition `part`, in order, for kernels whose tiles hold
/// 2^tile_shift tokens. Every role of a kernel walks the same pieces, so they agree on the tile sequence.
template <typename F>
__device__ __forceinline__ void for_each_piece(const DecodeParams& p, int part, int tile_shift, F&& f) {
  const PartitionStart pstart = p.plan_partitions[part];
  const PartitionStart pend = p.plan_partitions[part + 1];
  for (int32_t r = pstart.req; r < p.batch && (r < pend.req || (r == pend.req && pend.tile > 0)); ++r) {
    const int32_t len = request_len(p.lens, r);
    const int32_t t_begin = r == pstart.req ? pstart.tile : 0;
    const int32_t t_end = r == pend.req ? pend.tile : request_tiles(len, tile_shift);
    if (t_end - t_begin > 0) f(Piece{r, len, t_begin, t_end - t_begin});
  }
}

}  // namespace mlakit::cuda::decode
