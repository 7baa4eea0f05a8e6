#pragma once
// Host-side launch description of the portable (SM80+) split-KV decode kernel and its occupancy query.

#include <cuda_runtime_api.h>

#include "cuda/common/launch_sequence.h"
#include "cuda/decode/sm80/config.h"
#include "cuda/decode/smxx/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode {

/// The launch of the decode kernel for q dtype (bf16 when kBf16), KV kind and d_qk (576, or V4's 512), dense or
/// sparse (kSparse), with `row_groups` (1, 2 or 4) groups of 16 query rows per CTA, on a grid of (row blocks,
/// p.partitions); `p` must outlive the launch. One explicit instantiation per (kBf16, kKind, kSparse, kDqk) lives in
/// instantiations/.
template <bool kBf16, KvKind kKind, bool kSparse, int kDqk = kDimQK>
Status decode_kernel_launch(const DecodeParams& p, int row_groups, int row_blocks, bool pdl, KernelLaunch* out);

/// Threads of one decode CTA.
inline int decode_threads(int row_groups) { return row_groups * warps_per_group(row_groups) * 32; }

/// CTAs of the decode kernel that fit on one SM (from the CUDA occupancy calculator).
template <bool kBf16, KvKind kKind, bool kSparse, int kDqk = kDimQK>
Status decode_occupancy(int row_groups, int* ctas_per_sm);

}  // namespace mlakit::cuda::decode
