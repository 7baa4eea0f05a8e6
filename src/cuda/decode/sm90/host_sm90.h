#pragma once
// Host helpers of the Hopper kernel family that its dense and sparse entry points share: row blocks and
// partitions for a number of query rows, and the launch of the kernel followed by the combine.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"
#include "mlakit/kv_format.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode::sm90 {

/// The Hopper path declines fp8 caches for requests of fewer than kFp8MinRows query rows: its producer warpgroup
/// dequantises every tile for a 64-row wgmma tile that is then 3/4 empty, and the portable kernel (more CTAs per SM,
/// dequantising in shared memory) is faster there (docs/performance.md). The message names format, rows and rule.
inline constexpr int64_t kFp8MinRows = 17;
Status check_fp8_rows(KvFormat format, int64_t rows, const char* path);

/// CTAs per request along the rows: 64 query rows each (dense: s_q x h_q; sparse: h_q).
int64_t row_blocks_for(int64_t rows);

/// Partitions G of the batch's KV work on device `ordinal`: one CTA per SM (each takes ~227 KB of shared memory).
Status partitions_for(int64_t rows, int ordinal, int64_t* g);

/// Launches the kernel (dense, or sparse with `sparse`; v4: DeepSeek V4's geometry, sparse only; TMA only for dense
/// 16-bit caches with use_tma) and the combine of the split requests, as one sequence (launch_sequence.h).
Status launch_sm90(const DecodeParams& d, bool bf16, KvKind kind, bool sparse, bool v4, const CUtensorMap& map,
                   bool use_tma, int64_t rows, cudaStream_t stream);

}  // namespace mlakit::cuda::decode::sm90
