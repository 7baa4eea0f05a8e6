// Kernels of context parallelism (shard.h). Both are one thread per element: they run once per step, and an engine
// step holds at most a few thousand requests or new tokens.

#include "cuda/cp/shard.h"

namespace mlakit::cuda::cp {
namespace {

constexpr int kThreads = 256;

__global__ void shard_lengths_kernel(const int32_t* global, int64_t global_stride, int64_t b, ContextShard shard,
                                     int32_t* local, int64_t local_stride, int32_t s_q, int32_t* causal_limits,
                                     int64_t limits_stride) {
  const int64_t r = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= b) return;
  const int64_t len = global[r * global_stride];
  local[r * local_stride] = int32_t(shard.owned_before(len));  // <= len <= INT32_MAX
  if (causal_limits == nullptr) return;
  for (int32_t i = 0; i < s_q; ++i) {
    causal_limits[r * limits_stride + i] = int32_t(shard.owned_before(len - s_q + i + 1));
  }
}

__global__ void shard_slot_mapping_kernel(SlotMappingArgs a) {
  const int64_t j = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= a.tokens) return;
  const int64_t r = request_holding(a.query_start_loc, a.qsl_stride, a.batch, j);
  a.slot_mapping[j * a.slot_stride] =
      r < 0 ? -1
            : a.shard.slot_of(a.positions[j * a.positions_stride], a.block_table + r * a.table_stride, a.table_columns,
                              a.page_size);
}

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t launch_shard_lengths(const int32_t* global, int64_t global_stride, int64_t b, ContextShard shard,
                                 int32_t* local, int64_t local_stride, int32_t s_q, int32_t* causal_limits,
                                 int64_t limits_stride, cudaStream_t stream) {
  if (b <= 0) return cudaSuccess;
  shard_lengths_kernel<<<blocks_for(b), kThreads, 0, stream>>>(global, global_stride, b, shard, local, local_stride,
                                                               s_q, causal_limits, limits_stride);
  return cudaGetLastError();
}

cudaError_t launch_shard_slot_mapping(const SlotMappingArgs& a, cudaStream_t stream) {
  if (a.tokens <= 0) return cudaSuccess;
  shard_slot_mapping_kernel<<<blocks_for(a.tokens), kThreads, 0, stream>>>(a);
  return cudaGetLastError();
}

}  // namespace mlakit::cuda::cp
