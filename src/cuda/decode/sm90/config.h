#pragma once
// Tile shapes, roles and shared-memory layout of the Hopper (sm_90a) decode kernel: dense (issue 8) and
// sparse (issue 9; DeepSeek V4's geometry too, issue 13), which differ only in how the producer finds a row and in
// which rows the softmax masks.
// Host and device code both read this file; everything that ties the numbers together is static_assert'ed.
//
// One CTA = 64 query rows (h_q x s_q folded, the wgmma M) x one partition of the batch's KV work (the
// plan shared with the portable kernel). Three warpgroups with fixed roles (four in CTA pairs over fp8 caches: two
// producers, below):
//   0  the S warpgroup: S = Q K^T of every tile (64 x 64 x d_qk, 576 or V4's 512), the masks and the online softmax
//      (running row maxima and sums stay in its registers), P V into output columns [0, 256) with P from registers,
//      and P and the rescale factors to shared memory for warpgroup 1.
//   1  the V warpgroup: rescales output columns [256, 512) and adds P V into them with P from shared memory.
//   2  producer: loads Q and the KV tiles (TMA for whole tiles of pages >= 16 tokens, per-row
//      cp.async otherwise) into a ring of two stages, each split in three parts with their own
//      full/empty mbarriers (V columns 0-255, V columns 256-511, RoPE columns; V4 has no RoPE part), so
//      that a part is refilled as soon as the last warpgroup reading it is done with it.
// Fixed roles keep every warpgroup's loop on one path (static wgmma group counts) and let warpgroup 1 and the
// producer run with fewer registers than the S warpgroup (docs/experiments/sm90-consumer-roles-study.md).

#include "cuda/decode/smxx/config.h"

namespace mlakit::cuda::decode::sm90 {

// ---- tiles ----
inline constexpr int kBlockN = 64;     // KV tokens per tile: the N of Q.K^T and the K of P.V
inline constexpr int kTileShift = 6;   // log2(kBlockN), for the shared plan
inline constexpr int kRows = 64;       // query rows per CTA: the wgmma M
inline constexpr int kSwizzleValues = 64;                       // 16-bit values per 128-byte swizzled row
inline constexpr int kChunks = kDimQK / kSwizzleValues;        // 9 column chunks of a KV or Q row
inline constexpr int kChunkBytes = 64 * 128;                    // a chunk of 64 rows (tokens or query rows)
inline constexpr int kTileBytes = kChunks * kChunkBytes;        // 72 KB: one KV tile, or the Q block
inline constexpr int kVHalfChunks = kDimV / 2 / kSwizzleValues;  // 4 chunks of V per output half
inline constexpr int kRopeChunk = kDimV / kSwizzleValues;       // chunk 8
inline constexpr int kStages = 2;

// ---- the two geometries (smxx/config.h): d_qk 576 (DeepSeek V3: V is chunks 0-7, RoPE chunk 8) or 512 (V4,
// sparse only: V is the whole row, chunks 0-7, its RoPE columns in chunk 7). V and the output are the same 512
// columns in both, so only Q K^T, the Q block and the producer's row layout depend on kDqk. The shared-memory layout
// stays V3's (the larger): a V4 tile leaves its ninth chunk unused.
template <int kDqk>
struct Geometry {
  static_assert(kDqk == kDimQK || kDqk == kDimQKV4, "V3 (576) or V4 (512) columns");
  static constexpr int kQkChunks = kDqk / kSwizzleValues;          // 9 or 8 column chunks of Q and K
  static constexpr bool kRopePart = kQkChunks > kDimV / kSwizzleValues;  // V3: the RoPE chunk is a part of its own
  static constexpr int kParts = kRopePart ? 3 : 2;                 // stage parts in use (below)
};

// ---- roles ----
inline constexpr int kWarpgroupThreads = 128;
inline constexpr int kConsumers = 2;
inline constexpr int kSWarpgroup = 0;  // Q K^T, softmax, P V of output columns [0, 256)
inline constexpr int kVWarpgroup = 1;  // P V of output columns [256, 512)
inline constexpr int kProducer = kConsumers;  // warpgroup index of the (first) producer
/// Producer warpgroups: two in CTA pairs over fp8 caches (an even number of 64-row blocks per request), one elsewhere.
/// An fp8 producer loads every row into registers and converts it, and at 128 query rows it sets the pace (profiles:
/// busy ~95% of each tile, two fifths of it waiting on its loads). With two, producer k fills stage k, the tiles g with
/// g % 2 = k: each runs the one-producer code with two tile times per tile, its waits overlapping the other's work.
/// Measured on an H200 (docs/performance.md, 2026-11-28): the 128-head V3.2 and dense fp8 rows -4.5 to -6.2%, V4's -0.4
/// to -1.6%; CTAs without a pair were 15 - 36% slower with two (they lose the lookups a lone producer carries from tile
/// to tile, and spill), so they keep one.
template <KvKind kKind, bool kPair>
inline constexpr int kProducers = kKind != KvKind::k16Bit && kPair ? 2 : 1;
template <KvKind kKind, bool kPair>
inline constexpr int kThreadsOf = (kConsumers + kProducers<kKind, kPair>) * kWarpgroupThreads;
inline constexpr int kMaxThreads = (kConsumers + 2) * kWarpgroupThreads;  // 512
/// Registers per thread after setmaxnreg. The S warpgroup holds its half of O (64 x 256 fp32 = 128 per thread), S
/// (32) and P (16; P V of a tile may still read them while the next Q K^T writes S), the V warpgroup its half of O,
/// the producer row addresses and one pass of fp8 loads. setmaxnreg.inc draws only on the registers the CTA's own
/// warps released with setmaxnreg.dec (the CTA launched with Regs::kLaunch per thread), so the S warpgroup's gain must
/// not exceed what the others release, or its setmaxnreg.inc waits forever (seen: 216 / 216 / 80 hung every launch).
/// With two producers the CTA launches 512 threads with 128 registers each and the consumers grow to what they have
/// with one; the producers get 72 and 64 (ptxas spills up to 44 bytes in them). The V warpgroup cannot give up more:
/// at 152 its wgmma were serialised and it spilled 1.7 KB. No m64n256 wgmma fits in 128 registers at launch (ptxas
/// C7602), so those kernels issue P V in m64n128 halves (consumer_ops.cuh, pv_rs / pv_ss).
template <int kNumProducers>
struct Regs {
  static constexpr int kThreadsPerCta = (kConsumers + kNumProducers) * kWarpgroupThreads;
  static constexpr int kLaunch = 65536 / kThreadsPerCta / 8 * 8;  // 168 (384 threads) or 128 (512)
  static constexpr int kS = 216;
  static constexpr int kV = 160;
  static constexpr int kProducer = kNumProducers == 1 ? 128 : 72;  // the first producer's
  static constexpr int kProducer2 = 64;                              // the second's, with two
  static_assert(kS - kLaunch <= (kLaunch - kProducer) + (kNumProducers - 1) * (kLaunch - kProducer2) + (kLaunch - kV),
                "the consumers may take only what the others give back");
  static_assert((kS + kV + kProducer + (kNumProducers - 1) * kProducer2) * kWarpgroupThreads <= 65536);
  static_assert(kS % 8 == 0 && kV % 8 == 0 && kProducer % 8 == 0 && kProducer2 % 8 == 0, "multiples of 8");
};
// ---- the three parts of a KV stage (V4: the two V halves only), each with its own full and empty barrier ----
enum Part : int { kPartHalf0 = 0, kPartHalf1 = 1, kPartRope = 2 };
inline constexpr int kParts = 3;
__host__ __device__ constexpr int part_first_chunk(int part) {
  return part == kPartRope ? kRopeChunk : part * kVHalfChunks;
}
__host__ __device__ constexpr int part_chunks(int part) { return part == kPartRope ? 1 : kVHalfChunks; }
__host__ __device__ constexpr int part_bytes(int part) { return part_chunks(part) * kChunkBytes; }
/// Empty-barrier arrivals: one per warp of the warpgroup that releases the part (twice that in a CTA pair, below).
inline constexpr int kReleaseArrivals = kWarpgroupThreads / 32;

// ---- CTA pairs (fp8 caches) ----
// Where the producer converts fp8 rows, converting is what sets the pace at 128 query rows (docs/performance.md).
// The two row blocks of a request (or of a sparse query token) read the same tiles, so they run as a cluster of
// two CTAs: each producer converts half of every tile's rows (rank r: rows [32 r, 32 r + 32)), stores them in its
// own stage and copies them into the peer's (cp.async.bulk between the CTAs' shared memory, completing on the
// peer's full barriers), and a stage part is refilled only when the consumers of both CTAs released it. In the
// 128-byte swizzle every row keeps its own 128 bytes, so the half rows of a chunk are one contiguous 4 KB block.
inline constexpr int kPairRows = kBlockN / 2;                     // rows of a tile each CTA of a pair converts
inline constexpr int kPairChunkBytes = kPairRows * 128;           // 4 KB: those rows of one chunk
__host__ __device__ constexpr int part_pair_bytes(int part) { return part_chunks(part) * kPairChunkBytes; }

// ---- named barriers (0 is __syncthreads), each over both consumer warpgroups ----
// Where one warpgroup publishes shared memory for the other, both bar.sync (bar.arrive on the publishing side would
// let it run on, but compute-sanitizer racecheck does not see that ordering: with bar.sync it checks the exchange).
inline constexpr int kBarPReady = 1;      // the S warpgroup stored P and alpha of its tile
inline constexpr int kBarPV1Issued = 2;   // the V warpgroup issued that tile's P V (so it runs before the next Q K^T)
inline constexpr int kBarPFree = 3;       // the V warpgroup's P V of the tile is done: P and alpha may be rewritten
inline constexpr int kBarEpilogue = 5;    // the S warpgroup stored the rows' output scales (epilogue)
inline constexpr int kBarProducer = 6;  // producer k's converted rows are stored (before the copy to the peer): 6 + k
inline constexpr int kConsumerThreads = kConsumers * kWarpgroupThreads;

// ---- shared memory, in bytes from a 1024-byte aligned base ----
struct SmemLayout {
  static constexpr int q = 0;                                  // Q block, 9 swizzled chunks
  static constexpr int stage0 = kTileBytes;                    // KV stage s at stage0 + s * kTileBytes
  static constexpr int p = stage0 + kStages * kTileBytes;      // P of the last tile (64 x 64), swizzled
  static constexpr int full = p + 64 * 128;                    // uint64 [kStages][kParts]
  static constexpr int empty = full + kStages * kParts * 8;    // uint64 [kStages][kParts]
  static constexpr int q_full = empty + kStages * kParts * 8;  // uint64
  static constexpr int q_empty = q_full + 8;                   // uint64
  static constexpr int alpha = q_empty + 8;                    // float [64]: the last tile's rescale factors
  static constexpr int o_scale = alpha + kRows * 4;            // float [64]: each row's output factor (epilogue)
  static constexpr int total = o_scale + kRows * 4;
};
static_assert(SmemLayout::stage0 % 1024 == 0 && SmemLayout::p % 1024 == 0, "swizzle atoms are 1024-byte aligned");
static_assert(SmemLayout::total <= 227 * 1024, "one CTA per SM: the 227 KB a Hopper block may opt into");

}  // namespace mlakit::cuda::decode::sm90
