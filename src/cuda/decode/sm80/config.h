#pragma once
// Tile shapes of the portable (SM80+) dense decode kernel. Everything that ties them together is
// static_assert'ed here, so a change of one number cannot silently break another.

#include "cuda/decode/smxx/config.h"

namespace mlakit::cuda::decode {

// ---- tiles ----
/// Query rows (h_q x s_q folded) per mma row group: the M of mma.m16n8k16.
inline constexpr int kRowsPerGroup = 16;
/// KV tokens per tile. 32 tokens x 1152 bytes = 36 KB of bf16 per stage.
inline constexpr int kBlockN = 32;
/// log2(kBlockN): the plan counts this kernel's work in tiles of 2^kTileShift tokens.
inline constexpr int kTileShift = 5;
/// n-tiles of 8 tokens in one KV tile (the P fragments exchanged between the warps of a row group).
inline constexpr int kTokenNTiles = kBlockN / 8;
/// Warps sharing one row group: they split the tile's tokens for Q.K^T and the 512 output columns for
/// P.V. Four for a CTA of a single row group (h_q x s_q <= 16): that CTA is smem-limited to 2 per SM, and
/// with 2 warps each SM sub-partition ran one warp, with every mma/ldmatrix/shuffle latency exposed
/// (version 3: ~4 us per 32-token tile at h_q = 16 on an H200, far from its memory bound). Two for
/// larger CTAs, whose 8 warps already fill the SM (4 per group would need 64 x 4 warps' registers).
constexpr int warps_per_group(int row_groups) { return row_groups == 1 ? 4 : 2; }
/// Padding of every shared-memory row of 16-bit values: 576 + 8 elements = 1168 bytes, which is 16 mod
/// 128, so the 8 row addresses of one ldmatrix land in 8 distinct 16-byte bank groups.
inline constexpr int kSmemRowElems = kDimQK + kVec16;
inline constexpr int kSmemRowBytes = kSmemRowElems * 2;
/// cp.async stages of raw KV bytes. Two: one tile in flight while the other is computed. A 64-row CTA
/// does ~4.5 MFLOP per tile (~2000 clocks of mma.sync), longer than the ~1 us a load takes.
inline constexpr int kStages = 2;
/// Row groups (16 query rows each) a CTA may take: 1 (h_q x s_q <= 16), 2 (<= 32), 4 (more).
inline constexpr int kMaxRowGroups = 4;
inline constexpr int kMaxRowsPerCta = kMaxRowGroups * kRowsPerGroup;  // 64

static_assert(kDimQK % 16 == 0 && kDimV % 16 == 0, "mma k-steps of 16");
static_assert(kSmemRowBytes % 128 == 16, "ldmatrix rows must fall in distinct 16-byte bank groups");
static_assert(kBlockN % 16 == 0 && kTokenNTiles == 4, "two k16 steps of P per tile");
static_assert((1 << kTileShift) == kBlockN);
static_assert(kDimV % (16 * 4) == 0, "P.V n-tiles come in pairs of 8 columns for up to 4 warps");

/// Bytes of a raw fp8_ds_v4 row in shared memory: the 576-byte token block, then its 8 scale bytes.
inline constexpr int kDsV4RawBytes = ds_v4::kTokenBytes + ds_v4::kScaleBytes;
/// Shared-memory stride of a raw (not yet dequantised) row of d_qk columns: a multiple of 16 bytes, padded by
/// 16 so that cp.async writes of consecutive rows do not pile onto one bank group.
constexpr int raw_row_stride(KvKind k, int d_qk = kDimQK) {
  const int bytes = k == KvKind::kDsV4 ? kDsV4RawBytes : kv_kind_row_bytes(k, d_qk);
  return k == KvKind::k16Bit ? kSmemRowBytes : (bytes + 15) / 16 * 16 + 16;
}
static_assert(raw_row_stride(KvKind::kE4M3) == 592 && raw_row_stride(KvKind::kDsMla) == 672);
static_assert(raw_row_stride(KvKind::kDsV4, kDimQKV4) == 608 && raw_row_stride(KvKind::kE4M3, kDimQKV4) == 528);

/// Shared-memory layout of one decode CTA, in bytes.
struct SmemLayout {
  int q_off, tile_off, raw_off, xch_p_off, xch_m_off, valid_off, total;
};
constexpr SmemLayout smem_layout(KvKind k, int row_groups, bool sparse, int d_qk = kDimQK) {
  SmemLayout s{};
  s.q_off = 0;
  const int q_bytes = row_groups * kRowsPerGroup * kSmemRowBytes;
  // 16-bit caches are used straight from the cp.async stages; fp8 ones are dequantised into one tile.
  const int tile_bytes = k == KvKind::k16Bit ? 0 : kBlockN * kSmemRowBytes;
  s.tile_off = q_bytes;
  s.raw_off = s.tile_off + tile_bytes;
  const int raw_bytes = kStages * kBlockN * raw_row_stride(k, d_qk);
  s.xch_p_off = s.raw_off + raw_bytes;
  // P fragments exchanged between the warps of a row group: 4 token n-tiles x 32 lanes x 8 bytes.
  const int xch_p_bytes = row_groups * kTokenNTiles * 32 * 8;
  s.xch_m_off = s.xch_p_off + xch_p_bytes;
  // Row maxima and final row sums exchanged between the warps of a row group: 16 floats per warp.
  const int xch_m_bytes = row_groups * warps_per_group(row_groups) * kRowsPerGroup * 4;
  s.valid_off = s.xch_m_off + xch_m_bytes;
  // Sparse decode: one byte per row of each stage, 1 when its id is valid (the row was copied), so that the
  // softmax masks the zero-filled rows of invalid ids.
  const int valid_bytes = sparse ? kStages * kBlockN : 0;
  s.total = s.valid_off + valid_bytes;
  return s;
}
// The largest layout (64 rows, ds_mla) must fit the 163 KB an sm_80 block may opt into.
static_assert(smem_layout(KvKind::kDsMla, kMaxRowGroups, true).total <= 163 * 1024);
static_assert(smem_layout(KvKind::k16Bit, kMaxRowGroups, true).total <= 163 * 1024);
static_assert(smem_layout(KvKind::kDsV4, kMaxRowGroups, true, kDimQKV4).total <= 163 * 1024);

}  // namespace mlakit::cuda::decode
