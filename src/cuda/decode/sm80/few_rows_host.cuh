#pragma once
// Host side of the few-row decode kernels' instantiation files (instantiations/*_few_rows.cu): each file's launch and
// occupancy query, and its FewRowsKernel entry (few_rows_launch.h).

#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/launch_sequence.h"
#include "cuda/decode/sm80/few_rows_launch.h"
#include "cuda/decode/sm80/few_rows_layout.h"
#include "cuda/decode/smxx/launch.h"
#include "cuda/decode/smxx/params.h"

namespace mlakit::cuda::decode {

/// Host side of an instantiation file: sets kernel's dynamic shared memory (Layout<F>::kSmemBytes) and describes its
/// launch on (1, p.partitions) CTAs of 256 threads (`p` must outlive the launch).
template <class F>
Status few_rows_kernel_launch(void (*kernel)(DecodeParams), const DecodeParams& p, bool pdl, KernelLaunch* out) {
  if (p.rows > few_rows::kRows) return Status::internal("decode: the few-row kernel takes at most 16 rows");
  constexpr int kSmem = few_rows::Layout<F>::kSmemBytes;
  MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem));
  KernelLaunch& l = *out;
  l.grid = dim3(1, p.partitions);
  l.block = dim3(few_rows::kThreads);
  l.smem = kSmem;
  set_kernel(l, kernel, &p);
  l.pdl = pdl;
  return {};
}

/// CTAs of an instantiation file's kernel that fit on one SM (from the CUDA occupancy calculator); 0 without asking
/// when it needs more shared memory per block than the device allows (max_smem_per_block: its opt-in limit).
template <class F>
Status few_rows_kernel_occupancy(void (*kernel)(DecodeParams), int max_smem_per_block, int* ctas_per_sm) {
  constexpr int kSmem = few_rows::Layout<F>::kSmemBytes;
  *ctas_per_sm = 0;
  if (kSmem > max_smem_per_block) return {};  // e.g. sm_86 / sm_89: 99 KB per block
  MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem));
  MLAKIT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, kernel, few_rows::kThreads, kSmem));
  return {};
}

/// An instantiation file's FewRowsKernel (few_rows_launch.h) for its kernel.
template <class F, auto kKernel>
constexpr FewRowsKernel few_rows_entry() {
  return {[](const DecodeParams& p, bool pdl, KernelLaunch* out) {
            return few_rows_kernel_launch<F>(kKernel, p, pdl, out);
          },
          [](int max_smem_per_block, int* ctas_per_sm) {
            return few_rows_kernel_occupancy<F>(kKernel, max_smem_per_block, ctas_per_sm);
          }};
}

}  // namespace mlakit::cuda::decode
