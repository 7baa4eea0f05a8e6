#pragma once
// Kernels of context parallelism (docs/spec.md section 11): each rank's lengths, causal limits and cache slots,
// derived on the device from the global ones, so a decode step needs no host synchronisation.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "mlakit/context_shard.h"

namespace mlakit::cuda::cp {

/// For r < b: local[r * local_stride] = shard.owned_before(global[r * global_stride]); when causal_limits is not
/// null, also causal_limits[r * limits_stride + i] = shard.owned_before(global - s_q + i + 1) for i < s_q.
cudaError_t launch_shard_lengths(const int32_t* global, int64_t global_stride, int64_t b, ContextShard shard,
                                 int32_t* local, int64_t local_stride, int32_t s_q, int32_t* causal_limits,
                                 int64_t limits_stride, cudaStream_t stream);

/// Where this rank writes each new token: token j (request r, query_start_loc[r] <= j < query_start_loc[r + 1]) at
/// global position positions[j] goes to slot block_table[r][k / P] * P + k % P with k its local index when the rank
/// owns it, and to -1 (append_kv skips it) when another rank does, its position is negative or no request holds j.
struct SlotMappingArgs {
  const int64_t* positions;
  int64_t positions_stride;
  int64_t tokens;
  const int32_t* query_start_loc;  // [b + 1]
  int64_t qsl_stride;
  int64_t batch;
  const int32_t* block_table;
  int64_t table_stride, table_columns;
  int64_t page_size;
  ContextShard shard;
  int64_t* slot_mapping;
  int64_t slot_stride;
};
cudaError_t launch_shard_slot_mapping(const SlotMappingArgs& a, cudaStream_t stream);

}  // namespace mlakit::cuda::cp
