#pragma once
// The launch template of the Hopper decode kernel. Included only by instantiations/*.cu.

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/decode/sm90/kernel.cuh"
#include "cuda/decode/sm90/launch.h"
#include "cuda/decode/smxx/launch.h"

namespace mlakit::cuda::decode::sm90 {

template <bool kBf16, KvKind kKind, bool kSparse, bool kPair, int kDqk>
Status launch_with(const DecodeParams& p, const CUtensorMap& kv_map, bool use_tma, int row_blocks,
                   cudaStream_t stream, bool pdl) {
  auto kernel = decode_kernel<kBf16, kKind, kSparse, kPair, kDqk>;
  MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemAlloc));
  PdlLaunch l(dim3(row_blocks, p.partitions), dim3(kThreads), kSmemAlloc, stream, pdl, kPair ? 2u : 1u);
  MLAKIT_CUDA_TRY(cudaLaunchKernelEx(&l.cfg, kernel, p, kv_map, int(use_tma)));
  return {};
}

template <bool kBf16, KvKind kKind, bool kSparse, int kDqk>
Status launch_decode_kernel(const DecodeParams& p, const CUtensorMap& kv_map, bool use_tma, int row_blocks,
                            cudaStream_t stream, bool pdl) {
  // CTA pairs (config.h) where the producer converts fp8 rows and the row blocks pair up.
  if constexpr (kKind != KvKind::k16Bit) {
    if (row_blocks % 2 == 0) return launch_with<kBf16, kKind, kSparse, true, kDqk>(p, kv_map, use_tma, row_blocks, stream, pdl);
  }
  return launch_with<kBf16, kKind, kSparse, false, kDqk>(p, kv_map, use_tma, row_blocks, stream, pdl);
}

}  // namespace mlakit::cuda::decode::sm90
