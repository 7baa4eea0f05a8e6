#pragma once
// The Hopper (sm_90a) decode kernel, dense (issue 8, docs/spec.md section 1) or sparse (kSparse: issue 9,
// section 2; requests are query tokens, rows are gathered through indices): barrier set-up, then one branch per
// warpgroup role (producer.cuh, consumer.cuh: the S and V warpgroups). Compiled only for sm_90a (wgmma, setmaxnreg).

#include <cuda.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/consumer.cuh"
#include "cuda/decode/sm90/producer.cuh"
#include "cuda/decode/sm90/smem.cuh"
#include "cuda/decode/smxx/cta_plan.cuh"
#include "cuda/decode/smxx/params.h"

namespace mlakit::cuda::decode::sm90 {

/// Dynamic shared memory to request: the layout plus slack to align its base to 1024 bytes.
inline constexpr int kSmemAlloc = SmemLayout::total + 1024;
// The plan's static shared memory (cta_plan.cuh) comes on top of the dynamic allocation; 16 bytes of its alignment.
static_assert(kSmemAlloc + kCtaPlanSmemBytes<kMaxThreads> + 16 <= 227 * 1024, "a Hopper block may opt into 227 KB");

/// Grid: (row blocks of 64 query rows, plan partitions); kPair: in clusters of two along the row blocks (CTA pairs,
/// config.h: fp8 caches with an even number of row blocks). `kv_map` describes the cache for TMA when
/// use_tma is set (16-bit caches with pages of >= 16 tokens); otherwise every tile is copied row by row, and fp8
/// rows (kKind) are dequantised by the producer on the way. kDqk: 576 (V3) or 512 (V4's geometry, sparse only;
/// config.h, Geometry).
template <bool kBf16, KvKind kKind, bool kSparse, bool kPair, int kDqk>
__global__ void __launch_bounds__(kThreadsOf<kKind, kPair>, 1)
    decode_kernel(const __grid_constant__ DecodeParams p, const __grid_constant__ CUtensorMap kv_map, int use_tma) {
  static_assert(!kPair || kKind != KvKind::k16Bit, "CTA pairs share converted fp8 tiles only");
  static_assert(kDqk == kDimQK || kSparse, "V4's geometry is served for sparse decode only");
  static_assert((kKind == KvKind::kDsV4) <= (kDqk == kDimQKV4), "fp8_ds_v4 holds V4 rows only");
  // 16-byte aligned only, the base padded to 1024 below (kSmemAlloc has the slack): declared with 1024, it made the
  // compiler pad the plan's static shared memory to 1024 bytes, past the 227 KB a block may have.
  extern __shared__ __align__(16) uint8_t smem_raw[];
  const uint32_t raw = smem_addr(smem_raw);
  const uint32_t pad = (1024u - raw % 1024u) % 1024u;
  const Smem sm{smem_raw + pad, raw + pad};
  const int wg = int(threadIdx.x) / kWarpgroupThreads;
  // The other CTA of a pair (kPair: config.h, "CTA pairs", launched as clusters of two), or -1: a constant then, so
  // that a kernel without pairs compiles to the code it had before pairs existed.
  const int peer = kPair ? int(cluster_ctarank() ^ 1u) : -1;

  if (threadIdx.x == 0) {
    for (uint32_t st = 0; st < kStages; ++st) {
      for (int part = 0; part < kParts; ++part) {
        mbar_init(sm.full(st, part), kWarpgroupThreads);
        mbar_init(sm.empty(st, part), kReleaseArrivals * (peer >= 0 ? 2 : 1));  // a pair: both CTAs' consumers
      }
    }
    mbar_init(sm.q_full(), kWarpgroupThreads);
    mbar_init(sm.q_empty(), kReleaseArrivals);  // only the S warpgroup reads Q
    fence_barrier_init();
  }
  __syncthreads();
  if (peer >= 0) cluster_sync();  // the peer's barriers exist before anything arrives on them
  pdl_wait();  // q, the cache, seq_lens and the plan may all come from the previous kernels
  const PartitionBounds* bounds =
      partition_bounds<kSparse, kThreadsOf<kKind, kPair>>(p, int(blockIdx.y), kTileShift, blockIdx.x == 0);
  using R = Regs<kProducers<kKind, kPair>>;

  if (wg == kProducer) {
    setmaxnreg_dec<R::kProducer>();
    if (use_tma != 0 && threadIdx.x == kProducer * kWarpgroupThreads) tma_prefetch_descriptor(&kv_map);
    run_producer<kBf16, kKind, kSparse, kDqk, kPair>(p, &kv_map, use_tma != 0, sm, *bounds, int(blockIdx.y),
                                                     int(blockIdx.x), peer, 0);
  } else if (kProducers<kKind, kPair> > 1 && wg > kProducer) {
    if constexpr (kProducers<kKind, kPair> > 1) {  // the second producer (fp8 caches in CTA pairs, config.h)
      setmaxnreg_dec<R::kProducer2>();
      run_producer<kBf16, kKind, kSparse, kDqk, kPair>(p, &kv_map, false, sm, *bounds, int(blockIdx.y),
                                                       int(blockIdx.x), peer, 1);
    }
  } else if (wg == kSWarpgroup) {
    setmaxnreg_inc<R::kS>();
    run_s_warpgroup<kBf16, kKind, kSparse, kDqk, kPair>(p, use_tma != 0, sm, *bounds, int(blockIdx.y), int(blockIdx.x),
                                                        peer);
  } else {
    if constexpr (R::kV < R::kLaunch) {
      setmaxnreg_dec<R::kV>();
    } else {
      setmaxnreg_inc<R::kV>();
    }
    run_v_warpgroup<kBf16, kKind, kSparse, kDqk, kPair>(p, use_tma != 0, sm, *bounds, int(blockIdx.y), int(blockIdx.x),
                                                        peer);
  }
  // Neither CTA of a pair leaves while the other may still copy into its stages or arrive on its barriers.
  if (peer >= 0) cluster_sync();
}

}  // namespace mlakit::cuda::decode::sm90
