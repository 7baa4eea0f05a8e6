#pragma once
// The launch template of the decode kernel (dense, or sparse with kSparse): picks the row-group count (the one place where that runtime
// value becomes a template value), raises the shared-memory limit and describes the launch, with PDL where asked.
// Included only by instantiations/*.cu.

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/decode/sm80/kernel.cuh"
#include "cuda/decode/sm80/launch.h"
#include "cuda/decode/smxx/launch.h"

namespace mlakit::cuda::decode {

template <bool kBf16, KvKind kKind, bool kSparse, int kDqk, int kRowGroups>
Status decode_rows_launch(const DecodeParams& p, int row_blocks, bool pdl, KernelLaunch* out) {
  constexpr int kSmemBytes = smem_layout(kKind, kRowGroups, kSparse, kDqk).total;
  auto kernel = decode_kernel<kBf16, kKind, kRowGroups, kSparse, kDqk>;
  MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmemBytes));
  KernelLaunch& l = *out;
  l.grid = dim3(row_blocks, p.partitions);
  l.block = dim3(decode_threads(kRowGroups));
  l.smem = kSmemBytes;
  set_kernel(l, kernel, &p);
  l.pdl = pdl;
  return {};
}

template <bool kBf16, KvKind kKind, bool kSparse, int kDqk>
Status decode_kernel_launch(const DecodeParams& p, int row_groups, int row_blocks, bool pdl, KernelLaunch* out) {
  switch (row_groups) {
    case 1: return decode_rows_launch<kBf16, kKind, kSparse, kDqk, 1>(p, row_blocks, pdl, out);
    case 2: return decode_rows_launch<kBf16, kKind, kSparse, kDqk, 2>(p, row_blocks, pdl, out);
    case 4: return decode_rows_launch<kBf16, kKind, kSparse, kDqk, 4>(p, row_blocks, pdl, out);
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
