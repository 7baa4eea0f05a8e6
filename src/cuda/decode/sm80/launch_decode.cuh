#pragma once
// The launch template of the decode kernel (dense, or sparse with kSparse): picks the row-group count (the one place where that runtime
// value becomes a template value), raises the shared-memory limit and launches with PDL where asked.
// Included only by instantiations/*.cu.

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/decode/sm80/kernel.cuh"
#include "cuda/decode/sm80/launch.h"
#include "cuda/decode/smxx/launch.h"

namespace mlakit::cuda::decode {

template <bool kBf16, KvKind kKind, bool kSparse, int kDqk, int kRowGroups>
Status launch_decode_rows(const DecodeParams& p, int row_blocks, cudaStream_t stream, bool pdl) {
  constexpr int kSmemBytes = smem_layout(kKind, kRowGroups, kSparse, kDqk).total;
  auto kernel = decode_kernel<kBf16, kKind, kRowGroups, kSparse, kDqk>;
  MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemBytes));
  PdlLaunch l(dim3(row_blocks, p.partitions), dim3(decode_threads(kRowGroups)), kSmemBytes, stream, pdl);
  MLAKIT_CUDA_TRY(cudaLaunchKernelEx(&l.cfg, kernel, p));
  return {};
}

template <bool kBf16, KvKind kKind, bool kSparse, int kDqk>
Status launch_decode_kernel(const DecodeParams& p, int row_groups, int row_blocks, cudaStream_t stream, bool pdl) {
  switch (row_groups) {
    case 1: return launch_decode_rows<kBf16, kKind, kSparse, kDqk, 1>(p, row_blocks, stream, pdl);
    case 2: return launch_decode_rows<kBf16, kKind, kSparse, kDqk, 2>(p, row_blocks, stream, pdl);
    case 4: return launch_decode_rows<kBf16, kKind, kSparse, kDqk, 4>(p, row_blocks, stream, pdl);
    default: return Status::internal("decode: row_groups=" + std::to_string(row_groups) + ": must be 1, 2 or 4");
  }
}

template <bool kBf16, KvKind kKind, bool kSparse, int kDqk, int kRowGroups>
Status occupancy_rows(int* ctas_per_sm) {
  constexpr int kSmemBytes = smem_layout(kKind, kRowGroups, kSparse, kDqk).total;
  auto kernel = decode_kernel<kBf16, kKind, kRowGroups, kSparse, kDqk>;
  MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemBytes));
  MLAKIT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, kernel, decode_threads(kRowGroups),
                                                                kSmemBytes));
  return {};
}

template <bool kBf16, KvKind kKind, bool kSparse, int kDqk>
Status decode_occupancy(int row_groups, int* ctas_per_sm) {
  switch (row_groups) {
    case 1: return occupancy_rows<kBf16, kKind, kSparse, kDqk, 1>(ctas_per_sm);
    case 2: return occupancy_rows<kBf16, kKind, kSparse, kDqk, 2>(ctas_per_sm);
    case 4: return occupancy_rows<kBf16, kKind, kSparse, kDqk, 4>(ctas_per_sm);
    default: return Status::internal("decode: row_groups=" + std::to_string(row_groups) + ": must be 1, 2 or 4");
  }
}

}  // namespace mlakit::cuda::decode
