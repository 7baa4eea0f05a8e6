#pragma once
// Constants shared by every dense decode kernel family (sm80/, sm90/) and by the plan and combine that
// they share (smxx/): the geometry, the KV kinds and the scheduling constants. Tile shapes belong to each
// family's own config.h.

#include <cstdint>

#include "mlakit/kv_format.h"

namespace mlakit::cuda::decode {

// ---- geometry: the only one these kernels implement (docs/spec.md section 0, DeepSeek-V2/V3) ----
inline constexpr int kDimC = kDefaultDimC;     // d_c = d_v = 512
inline constexpr int kDimR = kDefaultDimR;     // d_r = 64
inline constexpr int kDimQK = kDimC + kDimR;   // 576
inline constexpr int kDimV = kDimC;            // 512
/// Elements per 16-byte vector of a 16-bit type.
inline constexpr int kVec16 = 8;
/// The kernels run the softmax in base 2 (exp2f) and report the LSE in natural log (kLn2: common/online_softmax.cuh).
inline constexpr float kLog2e = 1.4426950408889634f;

static_assert(kDimQK == kDimV + kDimR, "V is the first d_c columns of K");

// ---- DeepSeek V4 geometry (sparse decode on the portable path only): d_c = 448, d_r = 64, V the whole row ----
/// d_qk of V4: 512 columns, all of them V. So in both geometries V is the first kDimV = 512 columns of K, and a
/// kernel templated on d_qk (576 or 512) serves both with the same P.V and output code.
inline constexpr int kDimQKV4 = ds_v4::kDimC + ds_v4::kDimR;  // 512
static_assert(kDimQKV4 == kDimV, "V4's V is its whole row: the first kDimV columns of K, like V3's");

// ---- scheduling (plan.cu, combine.cu) ----
/// Per-request fixed cost, in KV tiles, that the plan adds to every request when it balances work:
/// loading the query rows and writing the output cost about as much as two tiles.
inline constexpr int kFixedCostTiles = 2;
/// What splitting a request costs, in KV tiles of the partition that splits it: its partial rows written and read back
/// and its share of the combine. The plan keeps requests whole when that makes the busiest partition at most this much
/// longer than an even split (plan.cuh, whole_requests_per_partition).
inline constexpr int kSplitCostTiles = 6;
/// Threads of the single-CTA plan kernel.
inline constexpr int kPlanThreads = 1024;
/// Plan requests up to which every decode CTA plans its own partition (cta_plan.cuh: no plan kernel, one launch
/// fewer): each thread of a 128-thread CTA then reads at most 32 lengths. Larger batches (sparse prefill with
/// topk_length) go through the plan kernel, which reads each length once instead of once per CTA.
inline constexpr int64_t kCtaPlanMaxRequests = 4096;
/// Warps per CTA of the combine kernel (they share the splits of one row).
inline constexpr int kCombineWarps = 8;

/// KV layouts the kernels know: the 16-bit formats (which must match q's dtype), and the fp8 formats,
/// dequantised on chip into q's dtype. kDsV4 (fp8_ds_v4, V4 geometry only) is read by the portable path.
enum class KvKind : int { k16Bit = 0, kE4M3 = 1, kDsMla = 2, kDsV4 = 3 };
inline constexpr int kNumKvKinds = 4;

/// Bytes of one cache row of each kind with d_qk columns; for kDsV4 the contiguous token block (448 e4m3 + 64
/// bf16), whose 8 scale bytes lie elsewhere in the page.
constexpr int kv_kind_row_bytes(KvKind k, int d_qk = kDimQK) {
  return k == KvKind::k16Bit ? 2 * d_qk
         : k == KvKind::kE4M3 ? d_qk
         : k == KvKind::kDsMla ? int(ds_mla::kRowBytes)
                               : int(ds_v4::kTokenBytes);
}
static_assert(ds_mla::kDimC == kDimC && ds_mla::kDimR == kDimR);

}  // namespace mlakit::cuda::decode
