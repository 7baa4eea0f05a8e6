// The helpers of context parallelism (context_parallel.h): validation, the host loops for CPU tensors, and the
// dispatch to the kernels of cuda/cp/shard.cu for CUDA tensors. Host and device compute with the same
// ContextShard functions, so they agree by construction; tests compare them anyway.

#include <string>

#include "core/check.h"
#include "mlakit/context_parallel.h"
#include "mlakit/registry.h"
#if MLAKIT_WITH_CUDA
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/cp/shard.h"
#endif

namespace mlakit {
#if !MLAKIT_WITH_CUDA
namespace {

Status cuda_missing(const char* op) {
  return Status::not_supported(std::string(op) + ": CUDA tensors need a build with CUDA (this one has " +
                               build_info() + ")");
}

}  // namespace
#endif

Status ShardSeqLensProblem::validate() const {
  MLAKIT_TRY(check::context_shard(shard, "shard"));
  MLAKIT_TRY(check::tensor(seq_lens, "seq_lens", {DType::kInt32}, 1, "[b]"));
  MLAKIT_TRY(check::tensor(local_seq_lens, "local_seq_lens", {DType::kInt32}, 1, "[b]"));
  MLAKIT_TRY(check::same_device(local_seq_lens, "local_seq_lens", seq_lens.device, "seq_lens"));
  MLAKIT_TRY(check::dim(local_seq_lens, "local_seq_lens", 0, seq_lens.shape[0], "b"));
  return check::no_alias({check::operand(local_seq_lens, "local_seq_lens")}, {check::operand(seq_lens, "seq_lens")});
}

Status ShardSlotMappingProblem::validate() const {
  MLAKIT_TRY(check::context_shard(shard, "shard"));
  MLAKIT_TRY(check::tensor(positions, "positions", {DType::kInt64}, 1, "[T]"));
  const Device dev = positions.device;
  MLAKIT_TRY(check::tensor(query_start_loc, "query_start_loc", {DType::kInt32}, 1, "[b + 1]"));
  MLAKIT_TRY(check::same_device(query_start_loc, "query_start_loc", dev, "positions"));
  MLAKIT_TRY(check::range("query_start_loc.shape[0]", query_start_loc.shape[0], 1, INT32_MAX, "b + 1"));
  const int64_t b = query_start_loc.shape[0] - 1;
  MLAKIT_TRY(check::tensor(block_table, "block_table", {DType::kInt32}, 2, "[b, max_pages]"));
  MLAKIT_TRY(check::same_device(block_table, "block_table", dev, "positions"));
  MLAKIT_TRY(check::dim(block_table, "block_table", 0, b, "b = query_start_loc.shape[0] - 1"));
  MLAKIT_TRY(check::range("page_size", page_size, 1, kMaxPageSize));
  MLAKIT_TRY(check::tensor(slot_mapping, "slot_mapping", {DType::kInt64}, 1, "[T]"));
  MLAKIT_TRY(check::same_device(slot_mapping, "slot_mapping", dev, "positions"));
  MLAKIT_TRY(check::dim(slot_mapping, "slot_mapping", 0, positions.shape[0], "T = positions.shape[0]"));
  return check::no_alias({check::operand(slot_mapping, "slot_mapping")},
                         {check::operand(positions, "positions"), check::operand(query_start_loc, "query_start_loc"),
                          check::operand(block_table, "block_table")});
}

Status shard_seq_lens(const ShardSeqLensProblem& p, Stream stream) {
  MLAKIT_TRY(p.validate());
  const int64_t b = p.seq_lens.shape[0];
  if (p.seq_lens.device.is_cpu()) {
    for (int64_t r = 0; r < b; ++r) {
      const int64_t len = *p.seq_lens.at<const int32_t>({r});
      *p.local_seq_lens.at<int32_t>({r}) = int32_t(p.shard.owned_before(len));
    }
    return {};
  }
#if MLAKIT_WITH_CUDA
  cuda::DeviceGuard guard;  // launched on the tensors' device, whichever is current
  MLAKIT_TRY(guard.set(p.seq_lens.device));
  MLAKIT_CUDA_TRY(cuda::cp::launch_shard_lengths(p.seq_lens.ptr<const int32_t>(), p.seq_lens.stride[0], b, p.shard,
                                                 p.local_seq_lens.ptr<int32_t>(), p.local_seq_lens.stride[0], 0,
                                                 nullptr, 0, static_cast<cudaStream_t>(stream)));
  return {};
#else
  (void)stream;
  return cuda_missing("shard_seq_lens");
#endif
}

Status shard_slot_mapping(const ShardSlotMappingProblem& p, Stream stream) {
  MLAKIT_TRY(p.validate());
  const int64_t tokens = p.positions.shape[0];
  const int64_t b = p.query_start_loc.shape[0] - 1;
  if (p.positions.device.is_cpu()) {
    for (int64_t j = 0; j < tokens; ++j) {
      const int64_t r = request_holding(p.query_start_loc.ptr<const int32_t>(), p.query_start_loc.stride[0], b, j);
      *p.slot_mapping.at<int64_t>({j}) =
          r < 0 ? -1
                : p.shard.slot_of(*p.positions.at<const int64_t>({j}), p.block_table.at<const int32_t>({r, 0}),
                                  p.block_table.shape[1], p.page_size);
    }
    return {};
  }
#if MLAKIT_WITH_CUDA
  cuda::DeviceGuard guard;  // launched on the tensors' device, whichever is current
  MLAKIT_TRY(guard.set(p.positions.device));
  cuda::cp::SlotMappingArgs a{};
  a.positions = p.positions.ptr<const int64_t>();
  a.positions_stride = p.positions.stride[0];
  a.tokens = tokens;
  a.query_start_loc = p.query_start_loc.ptr<const int32_t>();
  a.qsl_stride = p.query_start_loc.stride[0];
  a.batch = b;
  a.block_table = p.block_table.ptr<const int32_t>();
  a.table_stride = p.block_table.stride[0];
  a.table_columns = p.block_table.shape[1];
  a.page_size = p.page_size;
  a.shard = p.shard;
  a.slot_mapping = p.slot_mapping.ptr<int64_t>();
  a.slot_stride = p.slot_mapping.stride[0];
  MLAKIT_CUDA_TRY(cuda::cp::launch_shard_slot_mapping(a, static_cast<cudaStream_t>(stream)));
  return {};
#else
  (void)stream;
  return cuda_missing("shard_slot_mapping");
#endif
}

}  // namespace mlakit
