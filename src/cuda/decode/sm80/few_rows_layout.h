#pragma once
// The few-row decode kernels' constants, their three format descriptions (DsV4, DsMla, E4m3: what each format's body
// does differently) and the shared-memory layout of a CTA for each; few_rows.cuh's header explains the kernel they
// describe (phases, rings, fragment maps).

#include <cstdint>

#include "cuda/decode/sm80/config.h"
#include "cuda/decode/smxx/cta_plan.cuh"
#include "cuda/decode/smxx/params.h"
#include "mlakit/kv_format.h"

namespace mlakit::cuda::decode {

namespace few_rows {

inline constexpr int kWarps = 8;
inline constexpr int kThreads = kWarps * 32;
/// 2 CTAs per SM: 16 warps, and the 128-register bound (ptxas -v, sm_80 / sm_90a, no spills: DsV4 122 / 126,
/// DsMla 123 / 124, E4m3 122 / 120 dense and 127 / 121 sparse registers).
inline constexpr int kMinBlocks = 2;
inline constexpr int kRows = 16;        // mma M: heads of one query token (h_q <= 16)
inline constexpr int kTile = kBlockN;   // 32 index columns per tile (the plan's tile shift 5)
inline constexpr int kSlice = 64;       // dimensions per warp slice
inline constexpr int kRopeStride = kDimR * 2 + 16;  // 144 B: 16 mod 128 (ldmatrix / LDS.128 / LDS.32 conflict-free)
// ---- the CTA's shared memory past the raw stages, the same in both formats ----
inline constexpr int kVStride = kSlice * 2 + 16;  // 144 B per token of a private 16-bit V slice (bf16; fp16 for E4m3)
inline constexpr int kVSliceBytes = kTile * kVStride;  // 4,608
inline constexpr int kSPartStride = 40;  // floats per row of a partial S: 8 gid x 2 tig stores hit 32 distinct banks
inline constexpr int kPStride = 40;      // floats per row of P: the A-fragment LDS.64 (rows gid, cols 2 tig) likewise
// Bytes per row of P in 16 bits (formats without token scales, packed in (c) and read by ldmatrix in (e)): 32 tokens x
// 2 B + 16, so the 8 rows of an ldmatrix matrix start in 8 distinct 16-byte bank groups (80 r mod 128). In P's area.
inline constexpr int kPbStride = kTile * 2 + 16;
static_assert(kRows * kPbStride <= kRows * kPStride * 4);
static_assert(kVStride == kRopeStride, "V4's RoPE warp reads V from the raw RoPE area with the private slices' code");
static_assert(kSlice * kWarps == kDimV, "P V: warp g owns output columns [64 g, 64 g + 64)");

/// DeepSeek V4, fp8_ds_v4: 7 e4m3 slices (warps 0-6, one UE8M0 group each) and the bf16 RoPE slice (warp 7).
struct DsV4 {
  static constexpr KvKind kKind = KvKind::kDsV4;
  static constexpr int kDqk = kDimQKV4;
  static constexpr int kFp8Slices = ds_v4::kNumGroups;  // 7: slices 0-6 are e4m3 groups, slice 7 the bf16 RoPE
  static constexpr bool kRopeSplit = false;             // the RoPE part is warp 7's slice
  static constexpr int kRawRing = 3;                    // raw stages; scales and valid flags inside them
  static constexpr bool kSmallRing = false;
  static constexpr bool kScaleTable = true;   // UE8M0 bytes decoded once per tile into sc_tab, K scaled in (a)
  static constexpr bool kTokenScales = false;  // (so S and P carry none)
  static_assert(!(kScaleTable && kTokenScales), "a scale on K and on S / P would apply it twice");
  static constexpr bool kRopeE4m3 = false;    // the RoPE part is bf16
  static constexpr bool kF16Mma = false;      // bf16 operands (K x s must stay in range: see "fp16 operands")
  /// The warp that gathers every tile's rows (before barrier A, into stage (it - 1) % 3, ids from IdRows): the RoPE
  /// warp, which has no conversion to do before barrier A.
  static constexpr int kGatherWarp = kFp8Slices;
  // ---- raw stage: one tile's rows, split into three areas as the gather scatters them ----
  static constexpr int kFp8Stride = ds_v4::kDimC;  // 448 B = 64 mod 128: LDS.128 of 2 rows x 64 B conflict-free
  static constexpr int kScaleStride = ds_v4::kScaleBytes;  // 8 B
  static constexpr int kFp8Off = 0;
  static constexpr int kRopeOff = kFp8Off + kTile * kFp8Stride;          // 14,336
  static constexpr int kScaleOff = kRopeOff + kTile * kRopeStride;       // 18,944
  static constexpr int kStageBytes = kScaleOff + kTile * kScaleStride;  // 19,200
  static constexpr int kSmallSlotBytes = 0;
  static_assert(kFp8Slices + 1 == kWarps && kSlice == ds_v4::kGroupSize && kSlice * kWarps == kDqk);
};

/// DeepSeek V3.2, fp8_ds_mla: 8 e4m3 slices (fp32 group g / 2), the RoPE part split over the warps (m16n8k8 each).
struct DsMla {
  static constexpr KvKind kKind = KvKind::kDsMla;
  static constexpr int kDqk = kDimQK;
  static constexpr int kFp8Slices = ds_mla::kDimC / kSlice;  // 8: every warp
  static constexpr bool kRopeSplit = true;                   // RoPE columns [8 g, 8 g + 8) to warp g (m16n8k8)
  static constexpr int kRawRing = 2;                         // raw e4m3 + RoPE stages
  static constexpr bool kSmallRing = true;                   // scales and valid flags: a ring of 3 slots
  static constexpr bool kScaleTable = false;                 // fp32 scales, read from the small slot (LDS.64)
  static constexpr bool kTokenScales = true;                 // fp32 group scales on the partial S and on P
  static constexpr bool kRopeE4m3 = false;                   // the RoPE part is bf16
  static constexpr bool kF16Mma = false;
  static constexpr int kGatherWarp = -1;  // none: every warp gathers 4 rows after barrier A (header: "Rings")
  static constexpr int kFp8Stride = ds_mla::kDimC + 64;  // 576 B = 64 mod 128: LDS.128 of 2 rows x 64 B conflict-free
  static constexpr int kFp8Off = 0;
  static constexpr int kRopeOff = kFp8Off + kTile * kFp8Stride;     // 18,432
  static constexpr int kStageBytes = kRopeOff + kTile * kRopeStride;  // 23,040
  static constexpr int kScaleOff = 0;                                // (in the small slot, not the stage)
  /// A small slot: the tile's fp32 scales as [group][token] (LDS.64 gives tokens 2 tig, 2 tig + 1 of one group).
  static constexpr int kSmallSlotBytes = ds_mla::kNumGroups * kTile * 4;  // 512
  static_assert(kFp8Slices == kWarps && ds_mla::kGroupSize == 2 * kSlice && kSlice * kWarps + kDimR == kDqk);
  static_assert(kDimR == 8 * kWarps, "one m16n8k8 RoPE step per warp");
};

/// V3's geometry with an fp8_e4m3 cache: DsMla's slices, stages and rings, the RoPE part 64 e4m3 bytes (converted in
/// the RoPE step), no scale per token: the cache's one scale is folded into the softmax scale and the output.
struct E4m3 {
  static constexpr KvKind kKind = KvKind::kE4M3;
  static constexpr int kDqk = kDimQK;
  static constexpr int kFp8Slices = kDimV / kSlice;  // 8: every warp
  static constexpr bool kRopeSplit = true;           // RoPE columns [8 g, 8 g + 8) to warp g (m16n8k8)
  static constexpr int kRawRing = 2;
  static constexpr bool kSmallRing = true;  // the valid flags' 3 slots (DsMla's ring, without scales)
  static constexpr bool kScaleTable = false;
  static constexpr bool kTokenScales = false;
  static constexpr bool kRopeE4m3 = true;
  static constexpr bool kF16Mma = true;  // fp16 operands: e4m3 -> fp16 is one exact conversion (see "fp16 operands")
  static constexpr int kGatherWarp = -1;
  static constexpr int kFp8Stride = kDimV + 64;  // 576 B = 64 mod 128, as DsMla's
  static constexpr int kFp8Off = 0;
  static constexpr int kRopeOff = kFp8Off + kTile * kFp8Stride;      // 18,432
  static constexpr int kStageBytes = kRopeOff + kTile * kRopeStride;  // 23,040 (the RoPE rows use 64 of 144 B)
  static constexpr int kScaleOff = 0;
  static constexpr int kSmallSlotBytes = 0;
  static_assert(kFp8Slices == kWarps && kSlice * kWarps + kDimR == kDqk && kDimR == 8 * kWarps);
};

/// Where a piece's request's index rows start (sparse_id's addresses, as element offsets): column t < main_len is
/// p.indices[main + t], a later one p.extra_indices[extra + t - main_len]. The gather warp's (F::kGatherWarp >= 0),
/// kept in shared memory for the tile loop: recomputed per tile (request_offset for both sets, 64-bit) they cost ~30
/// instructions per tile, and kept in registers 5 registers. Offsets rather than pointers, so that the id loads stay
/// global loads (LDG).
struct IdRows {
  int64_t main;
  int64_t extra;
  int32_t main_len;
};
static_assert(sizeof(IdRows) <= 32);

/// The shared-memory layout of a format: raw stages, the small ring, the private V slices, the S partials, P, alpha,
/// the row statistics, the scale table and IdRows (DsV4) and the valid flags.
template <class F>
struct Layout {
  static constexpr int kStagesOff = 0;
  static constexpr int kSmallOff = kStagesOff + F::kRawRing * F::kStageBytes;
  static constexpr int kSmallSlots = F::kSmallRing ? 3 : 0;
  static constexpr int kVOff = kSmallOff + kSmallSlots * F::kSmallSlotBytes;
  static constexpr int kVSlices = F::kRopeSplit ? kWarps : F::kFp8Slices;  // warps with a private V slice
  static constexpr int kSPartOff = kVOff + kVSlices * kVSliceBytes;
  static constexpr int kPOff = kSPartOff + kWarps * kRows * kSPartStride * 4;
  static constexpr int kAlphaOff = kPOff + kRows * kPStride * 4;  // float [16]
  static constexpr int kStatOff = kAlphaOff + kRows * 4;          // float m[16], l[16] (epilogue)
  static constexpr int kScTabOff = kStatOff + 2 * kRows * 4;  // bf16x2 [kWarps][32] (F::kScaleTable): token scales
  static constexpr int kIdRowsOff = kScTabOff + (F::kScaleTable ? kWarps * kTile * 4 : 0);  // IdRows (gather warp)
  static constexpr int kValidSlots = F::kSmallRing ? 3 : F::kRawRing;
  static constexpr int kValidOff = kIdRowsOff + (F::kGatherWarp >= 0 ? 32 : 0);  // uint8 [kValidSlots][32]
  static constexpr int kSmemBytes = kValidOff + kValidSlots * kTile;
  static_assert(kVOff % 16 == 0 && kSPartOff % 16 == 0 && kPOff % 16 == 0 && F::kStageBytes % 16 == 0 &&
                kSmallOff % 16 == 0 && kScTabOff % 16 == 0 && kIdRowsOff % 16 == 0);
  // The gather warp writes tile it + 2 into stage (it - 1) % 3 before barrier A of tile it: that needs 3 raw stages,
  // no warp but the gather warp reading a stage in (e) (the scales only in (a), from sc_tab), and a warp with spare
  // time before barrier A (V4's RoPE warp). Without one, every warp gathers after barrier A into tile it's stage,
  // whose scales and flags must then outlive it in the small ring.
  static_assert(F::kGatherWarp < 0 ? F::kSmallRing
                                   : F::kRawRing == 3 && F::kScaleTable && !F::kRopeSplit &&
                                         F::kGatherWarp == F::kFp8Slices && F::kGatherWarp < kWarps);
  static_assert(F::kFp8Stride % 128 == 64 && kRopeStride % 128 == 16 && kVStride % 128 == 16);
  // Two CTAs per SM on sm_90 (228 KB of shared memory per SM, 1 KB reserved per CTA, plus partition_bounds' static
  // bytes: 96, which ptxas reports as 128; 256 allowed here). An A100 (164 KB) holds one.
  static_assert(kCtaPlanSmemBytes<kThreads> <= 256 && 2 * (kSmemBytes + 256 + 1024) <= 228 * 1024);
};
// V4's: 3 x 19,200 stages, 7 V slices, S partials, P (57,600 / 89,856 / 110,336 / 112,896), the scale table and
// IdRows (1,024 + 32 B): 114,240 bytes.
static_assert(Layout<DsV4>::kVOff == 57600 && Layout<DsV4>::kSPartOff == 89856 && Layout<DsV4>::kPOff == 110336 &&
              Layout<DsV4>::kAlphaOff == 112896 && Layout<DsV4>::kSmemBytes == 114240);
// V3.2's: 2 x 23,040 stages, 3 x 512 scale slots, 8 V slices, S partials, P: 107,808 bytes.
static_assert(Layout<DsMla>::kVOff == 47616 && Layout<DsMla>::kSmemBytes == 107808);
// fp8_e4m3's: DsMla's without the 3 x 512 scale slots: 106,272 bytes.
static_assert(Layout<E4m3>::kSmemBytes == 107808 - 3 * 512);

}  // namespace few_rows

}  // namespace mlakit::cuda::decode
