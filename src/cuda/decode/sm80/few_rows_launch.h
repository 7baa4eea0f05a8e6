#pragma once
// Host-side launch descriptions of the few-row decode kernels (few_rows.cuh: q bf16, h_q <= 16, sm_80+; sparse: fp8_ds_v4 in V4's
// geometry, fp8_ds_mla and fp8_e4m3 in V3's; dense with one query token: fp8_ds_mla, fp8_e4m3) and their occupancy
// queries. Chosen by host_sm80.cpp (use_few_rows) only; the portable kernel stays the default elsewhere.

#include <cuda_runtime_api.h>

#include "cuda/common/launch_sequence.h"
#include "cuda/decode/smxx/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode {

/// A few-row kernel's host entry points, defined in its instantiation file (few_rows_entry in few_rows.cuh).
struct FewRowsKernel {
  /// The kernel's launch on a grid of (1, p.partitions) CTAs of 256 threads (p.rows <= 16; the sparse or the dense
  /// plan, as the kernel reads its rows); `p` must outlive the launch.
  Status (*launch)(const DecodeParams& p, bool pdl, KernelLaunch* out);
  /// CTAs of the kernel that fit on one SM (from the CUDA occupancy calculator); 0 when it needs more shared memory per
  /// block than max_smem_per_block (the device's opt-in limit: 99 KB on sm_86 and sm_89).
  Status (*occupancy)(int max_smem_per_block, int* ctas_per_sm);
};

extern const FewRowsKernel kFewRowsDsV4;        ///< decode_few_rows_dsv4: sparse, V4 geometry, fp8_ds_v4
extern const FewRowsKernel kFewRowsDsMla;       ///< decode_few_rows_dsmla: sparse, V3 geometry, fp8_ds_mla
extern const FewRowsKernel kFewRowsE4m3;        ///< decode_few_rows_e4m3: sparse, V3 geometry, fp8_e4m3
extern const FewRowsKernel kFewRowsDsMlaDense;  ///< decode_few_rows_dsmla_dense: dense, one query token, fp8_ds_mla
extern const FewRowsKernel kFewRowsE4m3Dense;   ///< decode_few_rows_e4m3_dense: dense, one query token, fp8_e4m3

}  // namespace mlakit::cuda::decode
