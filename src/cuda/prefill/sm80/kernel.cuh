#pragma once
// The portable ragged prefill kernel (issue 10, docs/spec.md section 3): flash-attention-2 tiling with mma.sync
// (SM80+). One CTA = 64 query rows of one request and one head (4 warps of 16 rows), walking that request's keys
// in tiles of 64 through one K and one V buffer loaded by cp.async (PrefillSmem); Q stays in shared memory (its A
// fragments re-read per tile), S and O in fp32 accumulators, the softmax online in the log2 domain.
//
// The work mapping (slots to requests and blocks) and the parameters are shared with the Hopper kernel
// (smxx/block.cuh). Keys and query rows past a request are zero-filled in shared memory, never read; rows that see
// no key get out = 0 and lse = -inf.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/prefill/smxx/block.cuh"
#include "cuda/prefill/smxx/softmax.cuh"

namespace mlakit::cuda::prefill::sm80 {

inline constexpr int kBlockM = 64;  // query rows per CTA
inline constexpr int kBlockN = 64;  // keys per tile
inline constexpr int kWarps = 4;
inline constexpr int kThreads = kWarps * 32;

/// Shared memory of a CTA: Q, one K tile and one V tile; rows of D 16-bit values. One buffer each (64 KB at 192 / 128)
/// so that three CTAs fit on an sm_90 SM (two on sm_80's 164 KB, one on sm_86 / sm_89 / sm_120): K of the next tile
/// loads while this tile's softmax and P V run, V of the next while its Q K^T runs (flash-attention 2's order), and the
/// other CTAs cover what those loads leave exposed.
template <int kDQK, int kDV>
struct PrefillSmem {
  static constexpr int q = 0;
  static constexpr int k0 = q + kBlockM * kDQK * 2;
  static constexpr int v0 = k0 + kBlockN * kDQK * 2;
  static constexpr int total = v0 + kBlockN * kDV * 2;
};

/// Byte offset of the 16-byte piece `piece` of row `row` in a tile of rows of kD 16-bit values: pieces are
/// permuted within each 128-byte group by the row's low three bits, so that the eight rows an ldmatrix reads
/// at one column land in eight different bank groups.
template <int kD>
__device__ __forceinline__ uint32_t tile_offset(int row, int piece) {
  return uint32_t(row * kD * 2 + ((piece & ~7) | ((piece ^ row) & 7)) * 16);
}

/// Copies `rows` rows of kD values from `src` (row stride in elements) into a swizzled tile, zero-filling the
/// rows from `valid` on (their source is never read).
template <int kD>
__device__ __forceinline__ void load_tile(uint32_t dst, const uint8_t* src, int64_t stride, int valid, int rows) {
  constexpr int kPieces = kD / 8;
  for (int idx = int(threadIdx.x); idx < rows * kPieces; idx += kThreads) {
    const int row = idx / kPieces, piece = idx % kPieces;
    const bool ok = row < valid;
    const uint8_t* s = ok ? src + (int64_t(row) * stride + piece * 8) * 2 : src;
    cp_async_16(dst + tile_offset<kD>(row, piece), s, ok ? 16 : 0);
  }
}

template <bool kBf16, int kDQK, int kDV>
__global__ void __launch_bounds__(kThreads, 3) prefill_kernel(const __grid_constant__ PrefillParams p) {
  static_assert(kDQK % 16 == 0 && kDV % 16 == 0);
  using Smem = PrefillSmem<kDQK, kDV>;
  extern __shared__ __align__(128) uint8_t smem_raw[];
  const uint32_t base = smem_addr(smem_raw);

  // ---- which request, which 64 rows, which keys ----
  const int h = int(blockIdx.y);
  const Block blk = block_of_slot<kBlockM>(p, blockIdx.x);
  const int64_t q0 = blk.q0, lq = blk.lq, k0 = blk.k0, lk = blk.lk, m0 = blk.m0;
  if (m0 >= lq) return;
  const int rows = blk.rows(kBlockM);
  const int32_t n_tiles = int32_t((blk.kv_end(p.causal, kBlockM) + kBlockN - 1) / kBlockN);

  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int gid = lane / 4, tig = lane % 4;
  const uint8_t* q_src = p.q + ((q0 + m0) * p.q_stride_t + int64_t(h) * p.q_stride_h) * 2;
  const uint8_t* k_src = p.k + (k0 * p.k_stride_t + int64_t(h) * p.k_stride_h) * 2;
  const uint8_t* v_src = p.v + (k0 * p.v_stride_t + int64_t(h) * p.v_stride_h) * 2;

  // Tile t's keys into the K buffer, its values into the V buffer; each call is one cp.async group.
  auto load_k = [&](int32_t t) {
    const int valid = int(min(int64_t(kBlockN), lk - int64_t(t) * kBlockN));
    load_tile<kDQK>(base + Smem::k0, k_src + int64_t(t) * kBlockN * p.k_stride_t * 2, p.k_stride_t, valid, kBlockN);
    cp_async_commit();
  };
  auto load_v = [&](int32_t t) {
    const int valid = int(min(int64_t(kBlockN), lk - int64_t(t) * kBlockN));
    load_tile<kDV>(base + Smem::v0, v_src + int64_t(t) * kBlockN * p.v_stride_t * 2, p.v_stride_t, valid, kBlockN);
    cp_async_commit();
  };
  // Groups in order: Q with K(0), V(0), then per tile K(t + 1), V(t + 1) (empty past the last tile), so that "all but
  // the newest group" is always the buffer about to be read.
  load_tile<kDQK>(base + Smem::q, q_src, p.q_stride_t, rows, kBlockM);
  if (n_tiles > 0) {
    load_k(0);
    load_v(0);
  }


  // Visible keys of this thread's two rows: [0, limit).
  int64_t limit[2];
#pragma unroll
  for (int e = 0; e < 2; ++e) limit[e] = blk.limit(p.causal, m0 + warp * 16 + gid + 8 * e);
  float o[kDV / 8][4] = {};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int32_t t = 0; t < n_tiles; ++t) {
    cp_async_wait<1>();  // K(t) (and Q) landed; V(t) may still be on its way
    __syncthreads();
    const uint32_t ks = base + Smem::k0;
    const uint32_t vs = base + Smem::v0;

    // ---- S = Q K^T (16 x 64 per warp) ----
    float s[kBlockN / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < kDQK / 16; ++kk) {
      // Q's A fragment of this k-step, re-read from shared memory every tile: holding all of Q in registers
      // (48 of them at d_qk = 192) made ptxas spill.
      uint32_t qa[4];
      ldmatrix_x4(qa, base + Smem::q + tile_offset<kDQK>(warp * 16 + lane % 16, 2 * kk + lane / 16));
#pragma unroll
      for (int np = 0; np < kBlockN / 16; ++np) {  // two n-tiles of 8 keys per ldmatrix
        uint32_t b[4];
        const int j = lane / 8;
        ldmatrix_x4(b, ks + tile_offset<kDQK>(np * 16 + (j >> 1) * 8 + lane % 8, 2 * kk + (j & 1)));
        mma_16816<kBf16>(s[2 * np], qa, b[0], b[1]);
        mma_16816<kBf16>(s[2 * np + 1], qa, b[2], b[3]);
      }
    }

    __syncthreads();  // every warp is done with K(t): K(t + 1) loads under the softmax and P V
    if (t + 1 < n_tiles) {
      load_k(t + 1);
    } else {
      cp_async_commit();  // an empty group keeps the count
    }

    // ---- online softmax (log2 domain) ----
    const int64_t t0 = int64_t(t) * kBlockN;
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t col = t0 + nt * 8 + 2 * tig + (e & 1);
        s[nt][e] = col < limit[e >> 1] ? s[nt][e] : -INFINITY;  // also drops a masked key's NaN
        mx[e >> 1] = fmaxf(mx[e >> 1], s[nt][e]);
      }
    }
    // The maxima over the raw scores, scaled once (scale_log2 > 0 keeps the order): each weight below is one FFMA
    // and one MUFU.EX2, as on the Hopper path.
    mx[0] *= p.scale_log2;
    mx[1] *= p.scale_log2;
    float alpha[2], m_use[2];
    advance_rows(mx, m, l, alpha, m_use);
#pragma unroll
    for (int nt = 0; nt < kDV / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) o[nt][e] *= alpha[e >> 1];
    }
#pragma unroll
    for (int nt = 0; nt < kBlockN / 8; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = exp2_ftz(fmaf(s[nt][e], p.scale_log2, -m_use[e >> 1]));
        l[e >> 1] += s[nt][e];
      }
    }

    cp_async_wait<1>();  // V(t) landed; K(t + 1) may still be on its way
    __syncthreads();
    // ---- O += P V: P from the S accumulators (16 keys per k-step), V through ldmatrix.trans ----
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint32_t a[4] = {pack_float2<kBf16>(s[2 * kk][0], s[2 * kk][1]), pack_float2<kBf16>(s[2 * kk][2], s[2 * kk][3]),
                             pack_float2<kBf16>(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             pack_float2<kBf16>(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nn = 0; nn < kDV / 16; ++nn) {  // two n-tiles of 8 output columns per ldmatrix
        uint32_t b[4];
        const int j = lane / 8;
        ldmatrix_x4_trans(b, vs + tile_offset<kDV>(kk * 16 + (j & 1) * 8 + lane % 8, 2 * nn + (j >> 1)));
        mma_16816<kBf16>(o[2 * nn], a, b[0], b[1]);
        mma_16816<kBf16>(o[2 * nn + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with V(t): V(t + 1) loads under the next Q K^T
    if (t + 1 < n_tiles) load_v(t + 1);
  }
  cp_async_wait_all();

  // ---- epilogue: out and lse of this thread's rows ----
  reduce_row_sums(l);
#pragma unroll
  for (int e = 0; e < 2; ++e) {
    const int row = warp * 16 + gid + 8 * e;
    const auto row_o = [&](int nt, int c) { return o[nt][2 * e + c]; };
    if (row < rows) store_row<kBf16, kDV>(p, row_o, m[e], l[e], q0 + m0 + row, h, tig);
  }
}

}  // namespace mlakit::cuda::prefill::sm80
