#pragma once
// Host-side launchers of the decode kernels (plan, split-KV decode, combine). Each returns a Status;
// none synchronises with the host.

#include <cuda_runtime_api.h>

#include "cuda/decode/config.h"
#include "cuda/decode/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode {

/// The single-CTA plan kernel (plan.cu).
Status launch_plan(const PlanParams& p, cudaStream_t stream, bool pdl);

/// The decode kernel for q dtype (bf16 when kBf16) and KV kind, with `row_groups` (1, 2 or 4) groups of
/// 16 query rows per CTA, on a grid of (row blocks, p.partitions). One explicit instantiation per
/// (kBf16, kKind) lives in instantiations/.
template <bool kBf16, KvKind kKind>
Status launch_decode_kernel(const DecodeParams& p, int row_groups, int row_blocks, cudaStream_t stream, bool pdl);

/// Shared memory and threads of one decode CTA (for the occupancy the plan's partition count uses).
inline int decode_threads(int row_groups) { return row_groups * warps_per_group(row_groups) * 32; }

/// Merges the partial results of every split request into out and lse (combine.cu, SPEC.md section 6).
Status launch_combine(const DecodeParams& p, bool bf16, cudaStream_t stream, bool pdl);

}  // namespace mlakit::cuda::decode

namespace mlakit::cuda::decode {
/// CTAs of the decode kernel that fit on one SM (from the CUDA occupancy calculator).
template <bool kBf16, KvKind kKind>
Status decode_occupancy(int row_groups, int* ctas_per_sm);
}  // namespace mlakit::cuda::decode
