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
/// The kernels run the softmax in base 2 (exp2f) and report the LSE in natural log.
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;

static_assert(kDimQK == kDimV + kDimR, "V is the first d_c columns of K");

// ---- scheduling (plan.cu, combine.cu) ----
/// Per-request fixed cost, in KV tiles, that the plan adds to every request when it balances work:
/// loading the query rows and writing the output cost about as much as two tiles.
inline constexpr int kFixedCostTiles = 2;
/// Threads of the single-CTA plan kernel.
inline constexpr int kPlanThreads = 1024;
/// Warps per CTA of the combine kernel (they share the splits of one row).
inline constexpr int kCombineWarps = 8;

/// KV layouts the kernels know: the 16-bit formats (which must match q's dtype), and the two fp8
/// formats, dequantised on chip into q's dtype.
enum class KvKind : int { k16Bit = 0, kE4M3 = 1, kDsMla = 2 };

/// Bytes of one cache row of each kind.
constexpr int kv_kind_row_bytes(KvKind k) {
  return k == KvKind::k16Bit ? 2 * kDimQK : k == KvKind::kE4M3 ? kDimQK : int(ds_mla::kRowBytes);
}
static_assert(ds_mla::kDimC == kDimC && ds_mla::kDimR == kDimR);

}  // namespace mlakit::cuda::decode
