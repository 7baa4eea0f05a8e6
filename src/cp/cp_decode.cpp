// ContextParallelDecode (context_parallel.h): the shard's decode into the workspace, the exchange of the partial
// (out, lse) over NCCL, and the merge of docs/spec.md section 6. Only the exchange is new code: decode and merge
// are the backends' own, so every CUDA decode path and KV format works sharded.
//
// Partials travel in the dtype of q (what the decode kernels write; half the bytes of float32) with float32 LSE.
// Their rounding (2^-9 relative of a value <= vmax) stays inside docs/spec.md section 10's 2^-8 vmax, and the
// tests compare the merged result with the unsharded reference under that tolerance.

#include <string>

#include "mlakit/context_parallel.h"
#include "mlakit/registry.h"
#if MLAKIT_WITH_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace mlakit {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

/// Where the pieces live in the caller's workspace: [decode workspace | world partial outs | world partial LSEs].
struct ExchangeLayout {
  int64_t rows = 0;           // b * s_q * h_q
  size_t slot_out_bytes = 0;  // one rank's partial out
  size_t slot_lse_bytes = 0;  // one rank's partial LSE
  size_t decode_bytes = 0;
  size_t out_off = 0, lse_off = 0, total = 0;
};

ExchangeLayout exchange_layout(const Backend& decode, const DecodeProblem& p, int world) {
  ExchangeLayout l;
  l.rows = p.batch() * p.s_q() * p.h_q();
  l.slot_out_bytes = size_t(l.rows) * size_t(p.kv.dims.d_v()) * dtype_size(p.q.dtype);
  l.slot_lse_bytes = size_t(l.rows) * sizeof(float);
  l.decode_bytes = align_up(decode.workspace_bytes(p));
  l.out_off = l.decode_bytes;
  l.lse_off = l.out_off + align_up(l.slot_out_bytes * size_t(world));
  l.total = l.lse_off + align_up(l.slot_lse_bytes * size_t(world));
  return l;
}

/// The merge reads out and lse as [b * s_q * h_q, ...] rows of one stride: the (b, s_q, h_q) dimensions of `t`
/// must nest like a contiguous tensor's. Sets *row_stride to that stride.
Status rows_nest(const TensorView& t, const char* name, int64_t* row_stride) {
  int64_t stride = -1, span = 1;  // stride of a flattened row, and rows spanned by the dimensions inside
  for (int d = 2; d >= 0; --d) {
    if (t.shape[d] <= 1) continue;
    if (stride < 0) stride = t.stride[d];
    if (t.stride[d] != stride * span) {
      return Status::not_supported(std::string(name) + ".stride[" + std::to_string(d) + "]=" +
                                   std::to_string(t.stride[d]) + ": context-parallel decode merges " + name +
                                   " as [b * s_q * h_q] rows, so its b, s_q and h_q dimensions must nest as in a "
                                   "contiguous tensor (expected " + std::to_string(stride * span) + ")");
    }
    span *= t.shape[d];
  }
  *row_stride = stride < 0 ? 0 : stride;
  return {};
}

}  // namespace

#if MLAKIT_WITH_NCCL

namespace {

Status nccl_try(ncclResult_t r, const char* what) {
  if (r == ncclSuccess) return {};
  return Status::cuda_error(std::string(what) + ": " + ncclGetErrorString(r));
}
#define MLAKIT_NCCL_TRY(call) MLAKIT_TRY(nccl_try((call), #call))

}  // namespace

std::string nccl_build_info() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "nccl=ON (version unknown)";
  // NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch.
  return "nccl=" + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

ContextParallelDecode::ContextParallelDecode(const Backend& decode, const Backend& merge, ncclComm_t comm)
    : decode_(decode), merge_(merge), comm_(comm) {
  if (comm == nullptr) {
    status_ = Status::invalid("comm: null (an ncclComm_t from ncclCommInitRank or a ProcessGroup)");
    return;
  }
  status_ = nccl_try(ncclCommCount(comm, &world_), "ncclCommCount");
  if (status_.ok()) status_ = nccl_try(ncclCommUserRank(comm, &rank_), "ncclCommUserRank");
}

#else  // built without NCCL: the same API, every call says why it cannot run

std::string nccl_build_info() { return "nccl=OFF (" MLAKIT_NCCL_MISSING ")"; }

ContextParallelDecode::ContextParallelDecode(const Backend& decode, const Backend& merge, ncclComm_t comm)
    : decode_(decode), merge_(merge), comm_(comm) {
  status_ = Status::not_supported("ContextParallelDecode: this build has no NCCL (" + nccl_build_info() + ")");
}

#endif

Status ContextParallelDecode::supports(const DecodeProblem& p) const {
  int64_t out_row_stride = 0, lse_row_stride = 0;
  return supports(p, &out_row_stride, &lse_row_stride);
}

Status ContextParallelDecode::supports(const DecodeProblem& p, int64_t* out_row_stride, int64_t* lse_row_stride) const {
  MLAKIT_TRY(status_);
  if (p.shard.world != world_) {
    return Status::invalid("shard.world=" + std::to_string(p.shard.world) + ": must equal the communicator's size " +
                           std::to_string(world_));
  }
  if (p.shard.rank != rank_) {
    return Status::invalid("shard.rank=" + std::to_string(p.shard.rank) + ": must equal this rank of the communicator, " +
                           std::to_string(rank_));
  }
  MLAKIT_TRY(decode_.supports(p));
  if (!p.q.device.is_cuda()) return Status::not_supported("q.device=cpu: context-parallel decode runs on CUDA devices");
  MLAKIT_TRY(rows_nest(p.out, "out", out_row_stride));
  if (p.lse.defined()) MLAKIT_TRY(rows_nest(p.lse, "lse", lse_row_stride));
  return {};
}

Status ContextParallelDecode::check_workspace(const DecodeProblem& p, Workspace ws) const {
  const size_t need = exchange_layout(decode_, p, world_).total;
  if (ws.bytes >= need) return {};
  return Status::invalid("workspace.bytes=" + std::to_string(ws.bytes) + ": must be >= workspace_bytes(problem)=" +
                         std::to_string(need));
}

size_t ContextParallelDecode::workspace_bytes(const DecodeProblem& p) const {
  return exchange_layout(decode_, p, world_ > 0 ? world_ : 1).total;
}

Status ContextParallelDecode::plan(const DecodeProblem& p, Workspace ws, Stream stream) const {
  MLAKIT_TRY(supports(p));
  MLAKIT_TRY(check_workspace(p, ws));
  return decode_.plan(p, Workspace{ws.data, exchange_layout(decode_, p, world_).decode_bytes}, stream);
}

Status ContextParallelDecode::run(const DecodeProblem& p, Workspace ws, Stream stream, int root) const {
  int64_t out_row_stride = 0, lse_row_stride = 0;
  MLAKIT_TRY(supports(p, &out_row_stride, &lse_row_stride));
  if (root < -1 || root >= world_) {
    return Status::invalid("root=" + std::to_string(root) + ": must be -1 (every rank) or a rank in [0, " +
                           std::to_string(world_ - 1) + "]");
  }
  MLAKIT_TRY(check_workspace(p, ws));
  const ExchangeLayout l = exchange_layout(decode_, p, world_);
  const Workspace decode_ws{ws.data, l.decode_bytes};
  if (world_ == 1) return decode_.run(p, decode_ws, stream);  // nothing to exchange: straight into out
#if MLAKIT_WITH_NCCL
  uint8_t* base = static_cast<uint8_t*>(ws.data);
  uint8_t* outs = base + l.out_off;
  float* lses = reinterpret_cast<float*>(base + l.lse_off);
  const int64_t d_v = p.kv.dims.d_v();
  const auto out_slot = [&](int r) { return outs + size_t(r) * l.slot_out_bytes; };
  const auto lse_slot = [&](int r) { return lses + size_t(r) * size_t(l.rows); };

  // 1. This rank's shard, into its own slot of the exchange buffers.
  DecodeProblem local = p;
  local.out = TensorView::contiguous(out_slot(rank_), p.q.dtype, {p.batch(), p.s_q(), p.h_q(), d_v}, p.q.device);
  local.lse = TensorView::contiguous(lse_slot(rank_), DType::kFP32, {p.batch(), p.s_q(), p.h_q()}, p.q.device);
  MLAKIT_TRY(decode_.run(local, decode_ws, stream));

  // 2. The exchange: an all-gather of every slot, or each rank's slot sent to the root.
  const ncclDataType_t out_type = p.q.dtype == DType::kBF16 ? ncclBfloat16 : ncclFloat16;
  const size_t out_count = size_t(l.rows) * size_t(d_v);
  const auto cs = static_cast<cudaStream_t>(stream);
  // The calls between ncclGroupStart and ncclGroupEnd only queue work; the first failure among them is kept
  // and the group is closed whatever happened, so that a failed call never leaves this thread inside a group.
  MLAKIT_NCCL_TRY(ncclGroupStart());
  ncclResult_t queued = ncclSuccess;
  const char* failed = nullptr;
  const auto queue = [&](ncclResult_t r, const char* what) {
    if (r != ncclSuccess && queued == ncclSuccess) queued = r, failed = what;
  };
  if (root < 0) {
    queue(ncclAllGather(out_slot(rank_), outs, out_count, out_type, comm_, cs), "ncclAllGather(out)");
    queue(ncclAllGather(lse_slot(rank_), lses, size_t(l.rows), ncclFloat32, comm_, cs), "ncclAllGather(lse)");
  } else if (rank_ != root) {
    queue(ncclSend(out_slot(rank_), out_count, out_type, root, comm_, cs), "ncclSend(out)");
    queue(ncclSend(lse_slot(rank_), size_t(l.rows), ncclFloat32, root, comm_, cs), "ncclSend(lse)");
  } else {
    for (int r = 0; r < world_; ++r) {
      if (r == root) continue;
      queue(ncclRecv(out_slot(r), out_count, out_type, r, comm_, cs), "ncclRecv(out)");
      queue(ncclRecv(lse_slot(r), size_t(l.rows), ncclFloat32, r, comm_, cs), "ncclRecv(lse)");
    }
  }
  const ncclResult_t closed = ncclGroupEnd();
  MLAKIT_TRY(nccl_try(queued, failed != nullptr ? failed : "ncclGroup"));
  MLAKIT_TRY(nccl_try(closed, "ncclGroupEnd()"));
  if (root >= 0 && rank_ != root) return {};

  // 3. The merge of the world partials into the caller's out and lse (docs/spec.md section 6).
  MergeProblem m;
  m.parts_out = TensorView::contiguous(outs, p.q.dtype, {world_, l.rows, d_v}, p.q.device);
  m.parts_lse = TensorView::contiguous(lses, DType::kFP32, {world_, l.rows}, p.q.device);
  m.out = TensorView::strided(p.out.data, p.out.dtype, {l.rows, d_v}, {out_row_stride, 1}, p.out.device);
  if (p.lse.defined()) {
    m.lse = TensorView::strided(p.lse.data, DType::kFP32, {l.rows}, {lse_row_stride}, p.lse.device);
  }
  return merge_.run(m, stream);
#else
  return status_;
#endif
}

}  // namespace mlakit
