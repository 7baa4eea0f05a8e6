#pragma once
/// @file context_parallel.h
/// Decode context parallelism (docs/spec.md section 11): each request's tokens are spread over the GPUs of a group
/// (context_shard.h says which GPU holds which token); every GPU decodes over its own tokens and the partial
/// results are exchanged with NCCL and merged by section 6.
///
/// Two kinds of calls:
///  - the helpers each rank's engine runs before a step: its local lengths and the cache slots of the tokens it
///    owns (for append_kv). They take CPU tensors (computed on the host) or CUDA tensors (one kernel on `stream`,
///    no host synchronisation) and need no NCCL;
///  - ContextParallelDecode: decode over the shard, then the exchange and the merge. Needs a build with NCCL
///    (`nccl_build_info()`, `mlakit info`); in a build without it every call returns kNotSupported saying so.
///    ncclComm_t is declared here as nccl.h declares it, so including this header does not need nccl.h.

#include <cstddef>
#include <string>

#include "mlakit/backend.h"
#include "mlakit/context_shard.h"
#include "mlakit/problems.h"
#include "mlakit/status.h"
#include "mlakit/types.h"

typedef struct ncclComm* ncclComm_t;  // NOLINT: the same declaration as nccl.h's

namespace mlakit {

/// local_seq_lens[b] = shard.owned_before(seq_lens[b]): how many of request b's tokens this rank holds.
struct ShardSeqLensProblem {
  ContextShard shard{};
  TensorView seq_lens;        ///< int32 [b], the global L_b
  TensorView local_seq_lens;  ///< int32 [b], written
  Status validate() const;
};

/// The cache slots this rank writes for a step's new tokens (append_kv's slot_mapping): token j of request r
/// (query_start_loc[r] <= j < query_start_loc[r + 1]) at global position positions[j] goes to row k % P of page
/// block_table[r][k / P], k = shard.local_index(positions[j]), when this rank owns it; every other token gets -1
/// (skipped by append_kv): owned by another rank, a negative position, no request holds it, or a block-table entry
/// that is negative or past max_pages.
struct ShardSlotMappingProblem {
  ContextShard shard{};
  TensorView positions;        ///< int64 [T]: each new token's position in its request (0-based, global)
  TensorView query_start_loc;  ///< int32 [b + 1]: prefix sums of the new tokens per request
  TensorView block_table;      ///< int32 [b, max_pages]: this rank's pages
  int64_t page_size = 0;       ///< P of this rank's cache
  TensorView slot_mapping;     ///< int64 [T], written
  Status validate() const;
};

/// Runs on the tensors' device: a host loop for CPU tensors, one kernel on `stream` for CUDA tensors.
Status shard_seq_lens(const ShardSeqLensProblem& p, Stream stream = nullptr);
Status shard_slot_mapping(const ShardSlotMappingProblem& p, Stream stream = nullptr);

/// "nccl=2.27.7" when this build has NCCL, "nccl=OFF (...why...)" when it does not.
std::string nccl_build_info();

/// Decode over a context-parallel group. Each rank calls plan and run with its own problem: the same q, seq_lens
/// (global lengths), softmax_scale and causal flag on every rank, its own kv and block_table, and
/// shard = {world = the communicator's size, rank = its rank, interleave}. run decodes over the rank's tokens into
/// the workspace (partial out in the dtype of q, LSE in float32), exchanges the partials with NCCL on `stream` and
/// merges them (docs/spec.md section 6) into out and lse: on every rank (root = -1, an all-gather) or on rank
/// `root` only (the others send, and their out and lse are not written). A rank that holds no token of a request
/// contributes lse = -inf. Everything is enqueued on `stream` without host synchronisation, so a step can be
/// captured in a CUDA graph (NCCL supports capture) and replayed.
///
/// The merge treats out and lse as [b * s_q * h_q] rows of one stride, so their b, s_q and h_q dimensions must nest
/// as a contiguous tensor's do (out.stride[1] = h_q * out.stride[2], out.stride[0] = s_q * out.stride[1]; lse alike).
class ContextParallelDecode {
 public:
  /// `decode` runs the shard (any CUDA decode backend that supports the problem), `merge` the merge (e.g. "cuda").
  /// Both must outlive this object; so must `comm`, whose size and rank are read here once.
  ContextParallelDecode(const Backend& decode, const Backend& merge, ncclComm_t comm);

  /// Why the object cannot run (no NCCL in this build, or the communicator could not be queried); ok otherwise.
  Status status() const { return status_; }
  int world() const { return world_; }
  int rank() const { return rank_; }

  Status supports(const DecodeProblem& p) const;
  /// The decode backend's workspace for p plus the exchange buffers: world x (b s_q h_q) rows of d_v in the dtype
  /// of q, and as many float32 LSEs.
  size_t workspace_bytes(const DecodeProblem& p) const;
  /// The decode plan of this rank's shard (local lengths and split-KV schedule, on the device).
  Status plan(const DecodeProblem& p, Workspace ws, Stream stream) const;
  Status run(const DecodeProblem& p, Workspace ws, Stream stream, int root = -1) const;

 private:
  /// supports(), also giving the row strides of out and lse as the merge reads them ([b * s_q * h_q] rows).
  Status supports(const DecodeProblem& p, int64_t* out_row_stride, int64_t* lse_row_stride) const;
  Status check_workspace(const DecodeProblem& p, Workspace ws) const;

  const Backend& decode_;
  const Backend& merge_;
  ncclComm_t comm_;
  int world_ = 0;
  int rank_ = -1;
  Status status_;
};

}  // namespace mlakit
