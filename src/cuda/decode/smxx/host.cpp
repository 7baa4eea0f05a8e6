// Host code shared by the CUDA dense decode paths (smxx/host.h).

#include "cuda/decode/smxx/host.h"

#include <cstdlib>
#include <string>
#include <deque>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/common/split_cache.h"
#include "cuda/cp/shard.h"
#include "cuda/decode/smxx/launch.h"

namespace mlakit::cuda::decode {
namespace {

/// Page sizes the kernels are tested for (issues 3 and 8); anything else is refused by name.
constexpr int64_t kPageSizes[] = {1, 16, 32, 64, 128};
constexpr const char* kPageSizesText = "1, 16, 32, 64 or 128";
/// Alignment of q rows, out rows and cache rows: the kernels move 16-byte pieces.
constexpr int64_t kAlignBytes = 16;
constexpr int64_t kAlignElems16 = kAlignBytes / 2;

bool aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kAlignBytes == 0; }

Status check_rows_16(const TensorView& t, const char* name, const std::string& path) {
  if (!aligned(t.data)) {
    return Status::not_supported(std::string(name) + ".data: must be 16-byte aligned (" + path +
                                 " moves 16-byte vectors)");
  }
  for (int d = 0; d < t.ndim - 1; ++d) {
    if (t.stride[d] % kAlignElems16 != 0) {
      return Status::not_supported(std::string(name) + ".stride[" + std::to_string(d) + "]=" + std::to_string(t.stride[d]) +
                                   ": must be a multiple of " + std::to_string(kAlignElems16) +
                                   " elements (16-byte aligned rows) for " + path);
    }
  }
  return {};
}

/// A cache's pages: 16-byte aligned, page (and, but for fp8_ds_v4's 584-byte token view, row) strides in 16 bytes.
Status check_pages(const KvCacheView& kv, const char* name, const std::string& path) {
  if (!aligned(kv.pages.data)) {
    return Status::not_supported(std::string(name) + ".pages.data: must be 16-byte aligned (" + path +
                                 " copies 16-byte pieces)");
  }
  // fp8_ds_v4's stride[1] is its 584 bytes per token, not where a token lies: its 576-byte blocks are at 16-byte
  // multiples of the page start (docs/spec.md section 4).
  const int strided = kv.format == KvFormat::kFP8DsV4 ? 1 : 2;
  for (int d = 0; d < strided; ++d) {
    if (kv.pages.shape[d] <= 1) continue;  // a stride that is never stepped places nothing
    if (kv.pages.stride[d] % kAlignBytes != 0) {
      return Status::not_supported(std::string(name) + ".pages.stride[" + std::to_string(d) + "]=" +
                                   std::to_string(kv.pages.stride[d]) + ": must be a multiple of 16 bytes for " + path);
    }
  }
  return {};
}

/// The k_pe part of a split cache: 16-byte aligned like the pages, which check_pages checks.
Status check_k_pe(const KvCacheView& kv, const std::string& path) {
  if (!aligned(kv.k_pe.data)) {
    return Status::not_supported("kv.k_pe.data: must be 16-byte aligned (" + path + " copies 16-byte pieces)");
  }
  for (int d = 0; d < 2; ++d) {
    if (kv.k_pe.shape[d] > 1 && kv.k_pe.stride[d] % kAlignBytes != 0) {
      return Status::not_supported("kv.k_pe.stride[" + std::to_string(d) + "]=" + std::to_string(kv.k_pe.stride[d]) +
                                   ": must be a multiple of 16 bytes for " + path);
    }
  }
  return {};
}

/// The geometry: DeepSeek V3's (d_c 512, d_r 64, V the first d_c columns) on every path; V4's (d_c 448, d_r 64, V
/// the whole row, q bf16) where `v4` says the path has its kernels.
Status check_geometry(const TensorView& q, const KvCacheView& kv, const std::string& path, bool v4) {
  if (kv.format == KvFormat::kFP8DsV4 && !v4) {
    return Status::not_supported("kv.format=fp8_ds_v4: " + path +
                                 " does not read DeepSeek V4's paged format (the reference backend and both CUDA "
                                 "backends' sparse decode do)");
  }
  if (kv.dims.v_whole_row && !v4) {
    return Status::not_supported("kv.dims.v_whole_row=true: " + path +
                                 " implements V = the first d_c columns only (the reference backend takes V4's whole-row "
                                 "V, and so do both CUDA backends' sparse decode)");
  }
  const int want_c = kv.dims.v_whole_row ? ds_v4::kDimC : kDimC;
  const char* geometry = kv.dims.v_whole_row ? " with whole-row V (DeepSeek V4)" : "";
  if (kv.dims.d_c != want_c) {
    return Status::not_supported("kv.dims.d_c=" + std::to_string(kv.dims.d_c) + ": " + path + " implements d_c=" +
                                 std::to_string(want_c) + geometry + " only");
  }
  if (kv.dims.d_r != kDimR) {
    return Status::not_supported("kv.dims.d_r=" + std::to_string(kv.dims.d_r) + ": " + path + " implements d_r=" +
                                 std::to_string(kDimR) + " only");
  }
  if (kv.dims.v_whole_row && q.dtype != DType::kBF16) {
    return Status::not_supported(std::string("q.dtype=") + dtype_name(q.dtype) + ": " + path +
                                 " serves DeepSeek V4's geometry with q in bf16 only (the dtype V4 runs in)");
  }
  return {};
}

/// What every CUDA decode path needs of q, the cache and out, dense or sparse: the geometry, q's dtype against a
/// 16-bit cache, 16-byte aligned rows.
Status check_q_kv_out(const TensorView& q, const KvCacheView& kv, const TensorView& out, const std::string& path,
                      bool v4) {
  MLAKIT_TRY(check_geometry(q, kv, path, v4));
  if (kv.format == KvFormat::kBF16 && q.dtype != DType::kBF16) {
    return Status::not_supported(std::string("q.dtype=") + dtype_name(q.dtype) + ": " + path +
                                 " needs q in bf16 for a bf16 cache (the mma operands share one type)");
  }
  if (kv.format == KvFormat::kFP16 && q.dtype != DType::kFP16) {
    return Status::not_supported(std::string("q.dtype=") + dtype_name(q.dtype) + ": " + path +
                                 " needs q in fp16 for an fp16 cache (the mma operands share one type)");
  }
  MLAKIT_TRY(check_rows_16(q, "q", path));
  MLAKIT_TRY(check_rows_16(out, "out", path));
  return check_pages(kv, "kv", path);
}

/// Byte distance between consecutive tokens of a page: the view's row stride, or fp8_ds_v4's token block.
int64_t token_stride_bytes(const KvCacheView& kv) {
  return kv.format == KvFormat::kFP8DsV4 ? ds_v4::kTokenBytes : kv.pages.stride[1];
}

/// q, the cache, out, lse and tau into `d`: the fields dense and sparse decode fill alike.
void fill_q_kv_out(const TensorView& q, const KvCacheView& kv, const TensorView& out, const TensorView& lse,
                   float softmax_scale, DecodeParams& d) {
  d.q = q.data;
  d.q_stride_b = q.stride[0];
  d.q_stride_s = q.stride[1];
  d.q_stride_h = q.stride[2];
  d.pages = static_cast<const uint8_t*>(kv.pages.data);
  d.page_stride_bytes = kv.pages.stride[0];
  d.row_stride_bytes = token_stride_bytes(kv);
  d.out = out.data;
  d.out_stride_b = out.stride[0];
  d.out_stride_s = out.stride[1];
  d.out_stride_h = out.stride[2];
  d.lse = lse.defined() ? static_cast<float*>(lse.data) : nullptr;
  if (lse.defined()) {
    d.lse_stride_b = lse.stride[0];
    d.lse_stride_s = lse.stride[1];
    d.lse_stride_h = lse.stride[2];
  }
  d.kv_scale = kv.kv_scale;
  d.kv_scale_value = kv.kv_scale_value;
  d.softmax_scale = softmax_scale;
}

/// Whether the decode CTAs plan their own partitions (params.h's cta_plan) for a batch of `requests` plan requests.
bool ctas_plan(int64_t requests) { return requests <= kCtaPlanMaxRequests; }

/// The plan and partial slots of `d` at their places in `ws`, and whether the decode CTAs plan (d.batch is set).
void place_plan(Workspace ws, const WorkspaceLayout& w, int64_t partitions, DecodeParams& d) {
  uint8_t* base = static_cast<uint8_t*>(ws.data);
  d.partitions = int32_t(partitions);
  d.cta_plan = ctas_plan(d.batch) ? 1 : 0;
  d.plan_partitions = reinterpret_cast<const PartitionStart*>(base + w.partitions_off);
  d.plan_requests = reinterpret_cast<RequestPlan*>(base + w.requests_off);
  d.part_lse = reinterpret_cast<float*>(base + w.part_lse_off);
  d.part_out = reinterpret_cast<float*>(base + w.part_out_off);
  d.part_max = reinterpret_cast<float*>(base + w.part_max_off);
}

/// A context shard's local lengths in the workspace (docs/spec.md section 11), written by the plan.
int32_t* shard_lens(Workspace ws, const WorkspaceLayout& w) {
  return reinterpret_cast<int32_t*>(static_cast<uint8_t*>(ws.data) + w.shard_lens_off);
}

/// Where the plan and the kernels read the lengths of dense decode: seq_lens, or for a context shard its local
/// lengths.
RequestLengths dense_lengths(const DecodeProblem& p, Workspace ws, const WorkspaceLayout& w) {
  if (p.shard.sharded()) return RequestLengths{shard_lens(ws, w), 1, 1, INT32_MAX, nullptr, 0, 0, FastDiv{}};
  return RequestLengths{static_cast<const int32_t*>(p.seq_lens.data), p.seq_lens.stride[0], 1, INT32_MAX, nullptr, 0,
                        0, FastDiv{}};
}

/// A context shard's causal limits in the workspace, or null (the kernels' unsharded rule).
int32_t* causal_limits(const DecodeProblem& p, Workspace ws, const WorkspaceLayout& w) {
  if (!p.shard.sharded() || !p.causal) return nullptr;
  return reinterpret_cast<int32_t*>(static_cast<uint8_t*>(ws.data) + w.causal_off);
}

RequestLengths sparse_lengths(const SparseDecodeProblem& p) {
  const bool given = p.topk_length.defined();
  RequestLengths l{given ? static_cast<const int32_t*>(p.topk_length.data) : nullptr,
                   given ? p.topk_length.stride[0] : 0, int32_t(p.s_q()), int32_t(p.topk()), nullptr, 0, 0,
                   make_fast_div(int32_t(p.s_q()))};
  if (p.has_extra()) {
    const bool extra_given = p.extra_topk_length.defined();
    l.extra_lens = extra_given ? static_cast<const int32_t*>(p.extra_topk_length.data) : nullptr;
    l.extra_stride = extra_given ? p.extra_topk_length.stride[0] : 0;
    l.extra_cap = int32_t(p.extra_topk());
  }
  return l;
}

Status launch_plan_with(RequestLengths lens, int64_t requests, const WorkspaceLayout& w, Workspace ws,
                        int64_t partitions, int tile_shift, cudaStream_t stream, bool pdl) {
  MLAKIT_TRY(check_workspace_alignment(ws));
  if (ctas_plan(requests)) return {};  // the decode kernel plans: no launch here
  uint8_t* base = static_cast<uint8_t*>(ws.data);
  PlanParams pp{};
  pp.lens = lens;
  pp.batch = int32_t(requests);
  pp.partitions = int32_t(partitions);
  pp.tile_shift = tile_shift;
  pp.partitions_out = reinterpret_cast<PartitionStart*>(base + w.partitions_off);
  pp.requests_out = reinterpret_cast<RequestPlan*>(base + w.requests_off);
  pp.cost_scratch = reinterpret_cast<int64_t*>(base + w.cost_off);
  return launch_plan(pp, stream, pdl);
}

}  // namespace

KvKind kv_kind(KvFormat f) {
  switch (f) {
    case KvFormat::kFP8E4M3: return KvKind::kE4M3;
    case KvFormat::kFP8DsMla: return KvKind::kDsMla;
    case KvFormat::kBF16:
    case KvFormat::kFP16: return KvKind::k16Bit;
    case KvFormat::kFP8DsV4: return KvKind::kDsV4;  // check_geometry admits it only where the path reads it
  }
  std::abort();  // a format no kernel reads reached a launch: never read its pages as another layout
}

int64_t query_rows(const DecodeProblem& p) { return p.s_q() * p.h_q(); }

Status check_decode_common(const DecodeProblem& p, const char* path_name, bool split) {
  const std::string path = path_name;
  MLAKIT_TRY(check_q_kv_out(p.q, p.kv, p.out, path, /*v4=*/false));
  if (!split) MLAKIT_TRY(refuse_split_cache(p.kv, "kv", path));
  if (p.kv.split()) MLAKIT_TRY(check_k_pe(p.kv, path));
  const int64_t ps = p.kv.page_size();
  bool page_ok = false;
  for (int64_t v : kPageSizes) page_ok = page_ok || v == ps;
  if (!page_ok) {
    return Status::not_supported("kv.page_size=" + std::to_string(ps) + ": " + path + " supports page sizes " +
                                 kPageSizesText);
  }
  if (!p.block_table.device.is_cuda() || !p.seq_lens.device.is_cuda() ||
      (p.block_table_indptr.defined() && !p.block_table_indptr.device.is_cuda())) {
    return Status::not_supported(
        "block_table, block_table_indptr and seq_lens: must be on the CUDA device (the plan and kernels read them there)");
  }
  return {};
}

Status check_sparse_common(const SparseDecodeProblem& p, const char* path_name) {
  const std::string path = path_name;
  MLAKIT_TRY(check_q_kv_out(p.q, p.kv, p.out, path, /*v4=*/true));
  MLAKIT_TRY(refuse_split_cache(p.kv, "kv", path));
  MLAKIT_TRY(refuse_split_cache(p.extra_kv, "extra_kv", path));
  const auto on_device = [&](const TensorView& t, const char* name) -> Status {
    if (t.defined() && !t.device.is_cuda()) {
      return Status::not_supported(std::string(name) + ": must be on the CUDA device (" + path + " reads it there)");
    }
    return {};
  };
  MLAKIT_TRY(on_device(p.indices, "indices"));
  MLAKIT_TRY(on_device(p.topk_length, "topk_length"));
  MLAKIT_TRY(on_device(p.attn_sink, "attn_sink"));
  if (p.has_extra()) {
    MLAKIT_TRY(on_device(p.extra_indices, "extra_indices"));
    MLAKIT_TRY(on_device(p.extra_topk_length, "extra_topk_length"));
    MLAKIT_TRY(check_pages(p.extra_kv, "extra_kv", path));
    // Validation has checked format and dims against kv. fp8_e4m3's scale is folded into tau and the output once
    // for all keys, so both caches must have the same one: the same device pointer, or no pointer and equal values.
    const KvCacheView &kv = p.kv, &e = p.extra_kv;
    if (kv.format == KvFormat::kFP8E4M3 &&
        (e.kv_scale != kv.kv_scale || (kv.kv_scale == nullptr && e.kv_scale_value != kv.kv_scale_value))) {
      return Status::not_supported("extra_kv.kv_scale: " + path +
                                   " folds one fp8_e4m3 scale into the softmax for both caches; extra_kv must share "
                                   "kv's (the same device pointer, or equal values)");
    }
  }
  MLAKIT_TRY(on_device(p.max_logits, "max_logits"));
  if (sparse_requests(p) > INT32_MAX) {
    return Status::not_supported("b * s_q=" + std::to_string(sparse_requests(p)) + ": " + path +
                                 " schedules each query token as one request, at most " + std::to_string(INT32_MAX));
  }
  return {};
}

int64_t sparse_requests(const SparseDecodeProblem& p) { return p.batch() * p.s_q(); }

int kernel_dqk(const MlaDims& dims) { return dims.v_whole_row ? kDimQKV4 : kDimQK; }

Status device_facts(int ordinal, DeviceFacts** out) {
  thread_local std::deque<DeviceFacts> facts;  // indexed by device ordinal (growing it moves no entry)
  if (ordinal >= 0 && size_t(ordinal) < facts.size() && facts[size_t(ordinal)].info != nullptr) {
    *out = &facts[size_t(ordinal)];
    return {};
  }
  const DeviceInfo* info = nullptr;
  MLAKIT_TRY(cached_device_info(ordinal, &info));
  if (facts.size() <= size_t(ordinal)) facts.resize(size_t(ordinal) + 1);
  DeviceFacts& f = facts[size_t(ordinal)];
  f = DeviceFacts{};
  f.info = info;  // set last: a record with info is complete
  *out = &f;
  return {};
}

Status check_workspace_alignment(Workspace ws) {
  if (!aligned(ws.data)) return Status::invalid("workspace.data: must be 16-byte aligned (cudaMalloc memory is)");
  return {};
}

WorkspaceLayout layout_for(const DecodeProblem& p, int64_t partitions) {
  return workspace_layout(p.batch(), query_rows(p), partitions);
}

WorkspaceLayout layout_for(const SparseDecodeProblem& p, int64_t partitions) {
  return workspace_layout(sparse_requests(p), p.h_q(), partitions);
}

DecodeParams make_params(const DecodeProblem& p, Workspace ws, int64_t partitions) {
  int shift = 0;
  while ((int64_t(1) << shift) < p.kv.page_size()) ++shift;
  DecodeParams d{};
  fill_q_kv_out(p.q, p.kv, p.out, p.lse, p.softmax_scale, d);
  d.page_shift = shift;
  d.block_table = static_cast<const int32_t*>(p.block_table.data);
  d.block_table_stride = p.block_table.stride[0];
  if (p.block_table_indptr.defined()) d.block_table_indptr = static_cast<const int32_t*>(p.block_table_indptr.data);
  if (p.kv.split()) {
    d.k_pe_pages = static_cast<const uint8_t*>(p.kv.k_pe.data);
    d.k_pe_page_stride_bytes = p.kv.k_pe.stride[0];
    d.k_pe_row_stride_bytes = p.kv.k_pe.stride[1];
  }
  const WorkspaceLayout w = layout_for(p, partitions);
  d.lens = dense_lengths(p, ws, w);
  d.batch = int32_t(p.batch());
  d.s_q = int32_t(p.s_q());
  d.h_q = int32_t(p.h_q());
  d.h_q_div = make_fast_div(d.h_q);
  d.rows = int32_t(query_rows(p));
  d.causal = p.causal;
  d.causal_limits = causal_limits(p, ws, w);
  place_plan(ws, w, partitions, d);
  return d;
}

DecodeParams make_params(const SparseDecodeProblem& p, Workspace ws, int64_t partitions) {
  DecodeParams d{};
  fill_q_kv_out(p.q, p.kv, p.out, p.lse, p.softmax_scale, d);
  d.lens = sparse_lengths(p);
  d.batch = int32_t(sparse_requests(p));
  d.s_q = 1;  // a request is one query token: its rows are the h_q heads
  d.h_q = int32_t(p.h_q());
  d.h_q_div = make_fast_div(d.h_q);
  d.rows = int32_t(p.h_q());
  d.causal = false;  // docs/spec.md section 2: the top-k selection already respects causality
  d.indices = static_cast<const int32_t*>(p.indices.data);
  d.indices_stride_b = p.indices.stride[0];
  d.indices_stride_s = p.indices.stride[1];
  d.num_rows = p.kv.num_pages() * p.kv.page_size();
  d.page_size = int32_t(p.kv.page_size());
  d.page_div = make_fast_div(d.page_size);
  d.attn_sink = p.attn_sink.defined() ? static_cast<const float*>(p.attn_sink.data) : nullptr;
  if (p.has_extra()) {
    const KvCacheView& e = p.extra_kv;
    d.extra_pages = static_cast<const uint8_t*>(e.pages.data);
    d.extra_page_stride_bytes = e.pages.stride[0];
    d.extra_row_stride_bytes = token_stride_bytes(e);
    d.extra_indices = static_cast<const int32_t*>(p.extra_indices.data);
    d.extra_indices_stride_b = p.extra_indices.stride[0];
    d.extra_indices_stride_s = p.extra_indices.stride[1];
    d.extra_num_rows = e.num_pages() * e.page_size();
    d.extra_page_size = int32_t(e.page_size());
    d.extra_page_div = make_fast_div(d.extra_page_size);
  }
  if (p.max_logits.defined()) {
    d.max_logits = static_cast<float*>(p.max_logits.data);
    d.max_logits_stride_b = p.max_logits.stride[0];
    d.max_logits_stride_s = p.max_logits.stride[1];
    d.max_logits_stride_h = p.max_logits.stride[2];
  }
  place_plan(ws, layout_for(p, partitions), partitions, d);
  return d;
}

Status launch_plan_for(const DecodeProblem& p, Workspace ws, int64_t partitions, int tile_shift, cudaStream_t stream,
                       bool pdl) {
  const WorkspaceLayout w = layout_for(p, partitions);
  if (p.shard.sharded()) {
    MLAKIT_TRY(check_workspace_alignment(ws));
    // A plain launch (no PDL): seq_lens may come from the previous kernel. The plan's own wait then covers it.
    MLAKIT_CUDA_TRY(cp::launch_shard_lengths(static_cast<const int32_t*>(p.seq_lens.data), p.seq_lens.stride[0],
                                             p.batch(), p.shard, shard_lens(ws, w), 1,
                                             int32_t(p.s_q()), causal_limits(p, ws, w), kMaxCausalRows, stream));
  }
  return launch_plan_with(dense_lengths(p, ws, w), p.batch(), w, ws, partitions, tile_shift, stream, pdl);
}

Status launch_plan_for(const SparseDecodeProblem& p, Workspace ws, int64_t partitions, int tile_shift,
                       cudaStream_t stream, bool pdl) {
  return launch_plan_with(sparse_lengths(p), sparse_requests(p), layout_for(p, partitions), ws, partitions,
                          tile_shift, stream, pdl);
}

Status sparse_schedule(const SparseDecodeProblem& p, Workspace ws, int64_t partitions, int tile_shift,
                       cudaStream_t stream, bool pdl, DecodeParams* d) {
  const int64_t requests = sparse_requests(p);
  const bool uniform = !p.topk_length.defined() && !p.extra_topk_length.defined();
  const int64_t k = (requests + partitions - 1) / partitions;  // requests per partition when none is split
  if (uniform && requests > 0 && k * partitions * 100 <= requests * 105) {
    MLAKIT_TRY(check_workspace_alignment(ws));
    *d = make_params(p, ws, (requests + k - 1) / k);
    d->whole_requests = int32_t(k);
    return {};
  }
  MLAKIT_TRY(launch_plan_for(p, ws, partitions, tile_shift, stream, pdl));
  *d = make_params(p, ws, partitions);
  return {};
}

}  // namespace mlakit::cuda::decode
