#pragma once
// The pieces both consumer warpgroups of the Hopper decode kernel (consumer.cuh) are built from: operand
// descriptors, the P V and Q K^T wgmma steps, waits for and releases of stage parts, the sparse ids and masks, the lazy
// online-softmax step and the rescale of O, and the epilogue's output stores.
//
// Accumulator layout (wgmma m64nNk16, fp32): warp w of a warpgroup holds rows 16 w .. 16 w + 15; lane
// (gid = lane / 4, tig = lane % 4) holds rows 16 w + gid and 16 w + gid + 8, columns 8 j + 2 tig and
// 8 j + 2 tig + 1 of every n-tile j: d[4 j + e] is (row e / 2, column e % 2) of that set. The A fragment
// of P for k-step kk (tokens 16 kk .. 16 kk + 15) is therefore built from n-tiles 2 kk and 2 kk + 1.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/online_softmax.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/smem.cuh"
#include "cuda/decode/smxx/params.h"
#include "cuda/decode/smxx/plan.cuh"

namespace mlakit::cuda::decode::sm90 {

/// Descriptor of a K-major operand (Q, K, P): 64-value rows, 8-row atoms of 1024 bytes.
__device__ __forceinline__ uint64_t k_major(uint32_t addr) { return wgmma_desc(addr, 16, 1024); }
/// Descriptor of V as an MN-major B operand: token rows of 64 values per chunk, chunks kChunkBytes apart.
__device__ __forceinline__ uint64_t v_operand(uint32_t addr) { return wgmma_desc(addr, kChunkBytes, 1024); }

/// One k16 step of P V into a warpgroup's 256 output columns, P from registers (rs) or shared memory (ss), V's
/// operand `v` MN-major; kHalves: the kernel has two producers (config.h) and launches 512 threads with 128 registers
/// each, in which no m64n256 instruction fits (ptxas C7602), so they issue two m64n128 halves: accumulator registers
/// 0-63 hold output columns 0-127 of the 256, 64-127 the rest, whose V columns start two chunks further.
template <bool kHalves, bool kBf16>
__device__ __forceinline__ void pv_rs(float (&o)[128], const uint32_t (&a)[4], uint64_t v) {
  if constexpr (!kHalves) {
    wgmma_m64n256k16_rs_tb<kBf16>(o, a, v);
  } else {
    wgmma_m64n128k16_rs_tb<kBf16>(*reinterpret_cast<float(*)[64]>(&o[0]), a, v);
    wgmma_m64n128k16_rs_tb<kBf16>(*reinterpret_cast<float(*)[64]>(&o[64]), a, desc_plus(v, 2 * kChunkBytes));
  }
}
template <bool kHalves, bool kBf16>
__device__ __forceinline__ void pv_ss(float (&o)[128], uint64_t p, uint64_t v) {
  if constexpr (!kHalves) {
    wgmma_m64n256k16_ss_tb<kBf16>(o, p, v);
  } else {
    wgmma_m64n128k16_ss_tb<kBf16>(*reinterpret_cast<float(*)[64]>(&o[0]), p, v);
    wgmma_m64n128k16_ss_tb<kBf16>(*reinterpret_cast<float(*)[64]>(&o[64]), p, desc_plus(v, 2 * kChunkBytes));
  }
}

/// Waits until `part` of the tile of CTA tile index g has landed. A part copied with cp.async was written
/// through the generic proxy: `fence` (consumer_fences) makes it visible to this thread's wgmma (async proxy) reads.
__device__ __forceinline__ void wait_part(const Smem& sm, uint32_t g, int part, bool fence) {
  mbar_wait(sm.full(g & 1, part), (g >> 1) & 1);
  if (fence) fence_proxy_async();
}

/// S = Q K^T for the tile of CTA tile index g, in the order the producer fills its parts (V3: RoPE, then V half 0,
/// then V half 1; V4: the V halves), one commit group per part. `after_first_group` runs once the first group is
/// committed: a wgmma_wait<1> there waits for what was committed before this tile's Q K^T.
template <bool kBf16, int kDqk, class AfterFirstGroup>
__device__ __forceinline__ void issue_qk(float (&s)[32], const Smem& sm, uint32_t g, bool fence,
                                         AfterFirstGroup after_first_group) {
  const uint32_t st = g & 1;
  // The descriptors of Q and of the stage, built once: each k-step's is the base plus its offset (desc_plus), where
  // building each of the 36 from its address took about ten uniform instructions (ncu on 40c9a47).
  const uint64_t q = k_major(sm.q());
  const uint64_t kv = k_major(sm.stage(st));
  if constexpr (Geometry<kDqk>::kRopePart) {
    wait_part(sm, g, kPartRope, fence);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const uint32_t off = kRopeChunk * kChunkBytes + kk * 32;
      wgmma_m64n64k16_ss<kBf16>(s, desc_plus(q, off), desc_plus(kv, off), kk);  // kk = 0 overwrites S
    }
    wgmma_commit();
    after_first_group();
  }
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    wait_part(sm, g, half, fence);
    wgmma_fence();
#pragma unroll
    for (int c = 0; c < kVHalfChunks; ++c) {
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint32_t off = (half * kVHalfChunks + c) * kChunkBytes + kk * 32;
        // V4 has no RoPE group: its first k-step overwrites S.
        const int accumulate = Geometry<kDqk>::kRopePart || half > 0 || c > 0 || kk > 0;
        wgmma_m64n64k16_ss<kBf16>(s, desc_plus(q, off), desc_plus(kv, off), accumulate);
      }
    }
    wgmma_commit();
    if (!Geometry<kDqk>::kRopePart && half == 0) after_first_group();
  }
}

/// Sparse decode: the ids of the two tokens of a tile that this lane looks up, t0 + lane and t0 + 32 + lane (-1 past
/// the request). The S warpgroup reads them a tile before sparse_valid_mask needs them, so that their latency passes
/// under a tile of work (ncu: the wait for them was 4.4% of the S warpgroup's samples, on its critical path).
struct LaneIds {
  SparseId lo{-1, false}, hi{-1, false};
};
__device__ __forceinline__ LaneIds sparse_lane_ids(const DecodeParams& p, int32_t req, int64_t t0, int32_t main_len,
                                                   int32_t len, int lane) {
  LaneIds ids;
  with_tile_id_set<true>(t0, kBlockN, main_len, len, [&](auto set) {
    ids.lo = sparse_id<decltype(set)::value>(p, req, t0 + lane, main_len, len);
    ids.hi = sparse_id<decltype(set)::value>(p, req, t0 + 32 + lane, main_len, len);
  });
  __syncwarp();  // sparse_id branches per lane: converged again for the .aligned wgmma waits and barriers that follow
  return ids;
}

/// Sparse decode: bit k set when token t0 + k of the tile names a row (names_row, the test of sparse_row_ref), from
/// the warp's LaneIds of the tile.
__device__ __forceinline__ uint64_t sparse_valid_mask(const DecodeParams& p, const LaneIds& ids) {
  const uint32_t lo = __ballot_sync(0xffffffffu, names_row(p, ids.lo));
  const uint32_t hi = __ballot_sync(0xffffffffu, names_row(p, ids.hi));
  __syncwarp();  // converged for the named barriers that follow (compute-sanitizer synccheck)
  return uint64_t(lo) | (uint64_t(hi) << 32);
}

/// A barrier of both consumer warpgroups. Each reaches it from its own code, which the form without .aligned allows
/// (compute-sanitizer synccheck flags bar.sync there).
__device__ __forceinline__ void consumer_barrier(int id) { named_barrier_sync_unaligned(id, kConsumerThreads); }

/// Gives `part` of stage `st` back to the producer (one arrival per warp, from lane 0), and in a CTA pair to the
/// peer's producer too, which copies its half of the next tile into this CTA's stage (config.h, "CTA pairs").
__device__ __forceinline__ void release(const Smem& sm, uint32_t st, int part, int peer) {
  mbar_arrive(sm.empty(st, part));
  if (peer >= 0) mbar_arrive_cluster(sm.empty(st, part), uint32_t(peer));
}

/// O *= alpha (per row); skipped when no row maximum of the warp moved (alpha is exactly 1 then).
__device__ __forceinline__ void rescale(float (&o)[128], const float (&alpha)[2]) {
  if (__all_sync(0xffffffffu, alpha[0] == 1.0f && alpha[1] == 1.0f)) return;
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] *= alpha[(i >> 1) & 1];
}

/// advance_rows (common/online_softmax.cuh) with a lazy reference: a row keeps its maximum m while the tile's stays
/// within 2^kLazyLog2 of it, so alpha is exactly 1 and both warpgroups skip the 128-multiply rescale of O (ncu on
/// 40c9a47: 35% of dense and 67 - 93% of sparse warp-tiles rescaled, between the P hand-over and P V). Weights are then
/// at most 2^8, which fp32 sums and bf16 / fp16 P hold without loss of relative precision; lse = m + log2(l) holds for
/// any reference m. kTrackMax (sparse decode, which may write max_logits): m_max keeps the true maximum.
inline constexpr float kLazyLog2 = 8.0f;
template <bool kTrackMax>
__device__ __forceinline__ void advance_rows_lazily(float (&mx)[2], float (&m)[2], float (&m_max)[2], float (&l)[2],
                                                    float (&alpha)[2], float (&m_use)[2]) {
  reduce_row_maxima(mx);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    if constexpr (kTrackMax) m_max[e] = fmaxf(m_max[e], mx[e]);
    const float m_new = mx[e] > m[e] + kLazyLog2 ? mx[e] : m[e];  // m = -inf: any finite mx moves it
    m_use[e] = m_new == -INFINITY ? 0.0f : m_new;
    alpha[e] = m_new == m[e] ? 1.0f : exp2f(m[e] - m_use[e]);
    m[e] = m_new;
    l[e] *= alpha[e];
  }
}

/// A consumer thread's place in its warpgroup's accumulators (header comment): its lane and its two rows of the block.
struct AccLane {
  int lane;
  int tig;
  int rloc[2];
  __device__ explicit AccLane(int wg) {
    const int ctid = int(threadIdx.x) - wg * kWarpgroupThreads;
    lane = ctid % 32;
    tig = lane % 4;
    rloc[0] = (ctid / 32) * 16 + lane / 4;
    rloc[1] = rloc[0] + 8;
  }
};

/// Zeroes a warpgroup's half of O for a new piece. Behind a (no-op) wait: ptxas serialises every wgmma of the kernel
/// (warning C7515) when it cannot prove that no wgmma still accumulates into registers an ordinary instruction writes.
__device__ __forceinline__ void zero_o(float (&o)[128]) {
  wgmma_wait<0>();
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  fence_registers(o);
}

/// The 16-bit output words of n-tiles 4 q .. 4 q + 3 of one of this thread's rows, transposed within the quad (lanes
/// 4 gid .. 4 gid + 3, which hold the same row): on entry w[r] holds columns 2 tig, 2 tig + 1 of n-tile 4 q + r; on
/// return w[s] holds columns 2 s, 2 s + 1 of n-tile 4 q + tig, that n-tile's 8 values in order. Two __shfl_xor stages
/// (lane bit 1, then bit 0); at each, the words whose slot bit differs from the lane's bit move to the partner lane,
/// into the slot with that bit flipped. Every lane of the warp takes part.
__device__ __forceinline__ void quad_transpose_words(uint32_t (&w)[4], int tig) {
#pragma unroll
  for (int m = 2; m >= 1; m /= 2) {
    const bool hi = (tig & m) != 0;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j & m) continue;  // the slot pair (j, j + m)
      const uint32_t got = __shfl_xor_sync(0xffffffffu, hi ? w[j] : w[j + m], m);
      if (hi) {
        w[j] = got;
      } else {
        w[j + m] = got;
      }
    }
  }
}

/// Writes this thread's columns of output half `half` of its query rows mrow[k] (its rows k = 0, 1) times inv[k]: to
/// out when the piece is the whole request, else to the piece's partial slot (fp32, for the combine). Rows at or past
/// p.rows are not written. Every lane of the warp calls this (the direct path exchanges words within each quad).
///
/// Direct: one 16-byte store per row and n-tile, after quad_transpose_words; the 4-byte stores straight from the
/// accumulator layout were lg-throttled (ncu, V4 sparse h128: the S warpgroup's epilogue was 20% of its samples).
/// Both rows of 4 n-tiles go together, so that the 16 consecutive accumulators they free can take the transposed
/// words (a 16-byte store reads 4 aligned registers; a row at a time, the V warpgroup spilled at kVRegs). out's rows
/// are 16-byte aligned: check_q_kv_out (smxx/host.cpp, check_rows_16) refuses an out whose pointer or any stride but
/// the last is not, on every path that launches this kernel, so there is no 4-byte form.
template <bool kBf16, bool kSparse>
__device__ __forceinline__ void store_o(const DecodeParams& p, const Piece& pc, const float (&o)[128],
                                        const int (&mrow)[2], int half, int tig, const float (&inv)[2]) {
  if (pc.slot < 0) {
    uint8_t* base[2];  // n-tile 4 q + tig of row k at base[k] + 64 q
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int i = mrow[k] / p.h_q;
      const int h = mrow[k] % p.h_q;
      base[k] = static_cast<uint8_t*>(p.out) + (request_offset<kSparse>(p, pc.req, p.out_stride_b, p.out_stride_s) +
                                                int64_t(i) * p.out_stride_s + int64_t(h) * p.out_stride_h +
                                                half * (kDimV / 2) + 8 * tig) * 2;
    }
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      uint32_t w[2][4];
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int nt = 4 * q + r;
#pragma unroll
        for (int k = 0; k < 2; ++k) {
          w[k][r] = pack_float2<kBf16>(o[4 * nt + 2 * k] * inv[k], o[4 * nt + 2 * k + 1] * inv[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        quad_transpose_words(w[k], tig);
        if (mrow[k] < p.rows) {
          *reinterpret_cast<uint4*>(base[k] + 64 * q) = make_uint4(w[k][0], w[k][1], w[k][2], w[k][3]);
        }
      }
    }
  } else {
    const int col0 = half * (kDimV / 2) + 2 * tig;
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      if (mrow[k] >= p.rows) continue;
      float* orow = p.part_out + (int64_t(pc.slot) * p.rows + mrow[k]) * kDimV;
#pragma unroll
      for (int nt = 0; nt < 32; ++nt) {
        *reinterpret_cast<float2*>(orow + col0 + 8 * nt) =
            make_float2(o[4 * nt + 2 * k] * inv[k], o[4 * nt + 2 * k + 1] * inv[k]);
      }
    }
  }
}

}  // namespace mlakit::cuda::decode::sm90
