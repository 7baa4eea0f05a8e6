#pragma once
// Host helpers of the Hopper kernel family that its dense and sparse entry points share: row blocks and
// partitions for a number of query rows, and the launch of the kernel followed by the combine.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/decode/smxx/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode::sm90 {

/// CTAs per request along the rows: 64 query rows each (dense: s_q x h_q; sparse: h_q).
int64_t row_blocks_for(int64_t rows);

/// Partitions G of the batch's KV work: one CTA per SM (each takes ~227 KB of shared memory).
Status partitions_for(int64_t rows, int64_t* g);

/// Launches the kernel (dense, or sparse with `sparse`: no TMA) and then the combine of the split requests.
Status launch_sm90(const DecodeParams& d, bool bf16, bool sparse, const CUtensorMap& map, bool use_tma,
                   int64_t rows, cudaStream_t stream);

}  // namespace mlakit::cuda::decode::sm90
