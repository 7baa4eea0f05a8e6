#pragma once
// The launch description of the Hopper decode kernel. Included only by instantiations/*.cu.

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/decode/sm90/kernel.cuh"
#include "cuda/decode/sm90/launch.h"
#include "cuda/decode/smxx/launch.h"

namespace mlakit::cuda::decode::sm90 {

template <bool kBf16, KvKind kKind, bool kSparse, bool kPair, int kDqk>
Status launch_with(const DecodeParams& p, const CUtensorMap& kv_map, const int* use_tma, int row_blocks, bool pdl,
                   KernelLaunch* out) {
  auto kernel = decode_kernel<kBf16, kKind, kSparse, kPair, kDqk>;
  MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemAlloc));
  KernelLaunch& l = *out;
  l.grid = dim3(row_blocks, p.partitions);
  l.block = dim3(kThreadsOf<kKind, kPair>);
  l.smem = kSmemAlloc;
  set_kernel(l, kernel, &p, &kv_map, use_tma);
  l.pdl = pdl;
  l.cluster_x = kPair ? 2u : 1u;
  return {};
}

template <bool kBf16, KvKind kKind, bool kSparse, int kDqk>
Status decode_kernel_launch(const DecodeParams& p, const CUtensorMap& kv_map, const int* use_tma, int row_blocks,
                            bool pdl, KernelLaunch* out) {
  // CTA pairs (config.h) where the producer converts fp8 rows and the row blocks pair up.
  if constexpr (kKind != KvKind::k16Bit) {
    if (row_blocks % 2 == 0) return launch_with<kBf16, kKind, kSparse, true, kDqk>(p, kv_map, use_tma, row_blocks, pdl, out);
  }
  return launch_with<kBf16, kKind, kSparse, false, kDqk>(p, kv_map, use_tma, row_blocks, pdl, out);
}

}  // namespace mlakit::cuda::decode::sm90
