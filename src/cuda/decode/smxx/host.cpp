// Host code shared by the CUDA dense decode paths (smxx/host.h).

#include "cuda/decode/smxx/host.h"

#include <string>
#include <vector>

#include "cuda/common/check.h"
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

}  // namespace

KvKind kv_kind(KvFormat f) {
  switch (f) {
    case KvFormat::kFP8E4M3: return KvKind::kE4M3;
    case KvFormat::kFP8DsMla: return KvKind::kDsMla;
    default: return KvKind::k16Bit;
  }
}

int64_t query_rows(const DecodeProblem& p) { return p.s_q() * p.h_q(); }

Status check_decode_common(const DecodeProblem& p, const char* path_name) {
  const std::string path = path_name;
  if (p.kv.dims.d_c != kDimC) {
    return Status::not_supported("kv.dims.d_c=" + std::to_string(p.kv.dims.d_c) + ": " + path + " implements d_c=" +
                                 std::to_string(kDimC) + " only");
  }
  if (p.kv.dims.d_r != kDimR) {
    return Status::not_supported("kv.dims.d_r=" + std::to_string(p.kv.dims.d_r) + ": " + path + " implements d_r=" +
                                 std::to_string(kDimR) + " only");
  }
  const int64_t ps = p.kv.page_size();
  bool page_ok = false;
  for (int64_t v : kPageSizes) page_ok = page_ok || v == ps;
  if (!page_ok) {
    return Status::not_supported("kv.page_size=" + std::to_string(ps) + ": " + path + " supports page sizes " +
                                 kPageSizesText);
  }
  if (p.kv.format == KvFormat::kBF16 && p.q.dtype != DType::kBF16) {
    return Status::not_supported(std::string("q.dtype=") + dtype_name(p.q.dtype) + ": " + path +
                                 " needs q in bf16 for a bf16 cache (the mma operands share one type)");
  }
  if (p.kv.format == KvFormat::kFP16 && p.q.dtype != DType::kFP16) {
    return Status::not_supported(std::string("q.dtype=") + dtype_name(p.q.dtype) + ": " + path +
                                 " needs q in fp16 for an fp16 cache (the mma operands share one type)");
  }
  MLAKIT_TRY(check_rows_16(p.q, "q", path));
  MLAKIT_TRY(check_rows_16(p.out, "out", path));
  if (!aligned(p.kv.pages.data)) {
    return Status::not_supported("kv.pages.data: must be 16-byte aligned (" + path + " copies 16-byte pieces)");
  }
  for (int d = 0; d < 2; ++d) {
    if (p.kv.pages.stride[d] % kAlignBytes != 0) {
      return Status::not_supported("kv.pages.stride[" + std::to_string(d) + "]=" + std::to_string(p.kv.pages.stride[d]) +
                                   ": must be a multiple of 16 bytes for " + path);
    }
  }
  if (!p.block_table.device.is_cuda() || !p.seq_lens.device.is_cuda()) {
    return Status::not_supported("block_table and seq_lens: must be on the CUDA device (the plan reads them there)");
  }
  return {};
}

Status device_facts(DeviceFacts** out) {
  thread_local std::vector<DeviceFacts> facts;  // indexed by device ordinal
  int ordinal = -1;
  if (cudaGetDevice(&ordinal) == cudaSuccess && ordinal >= 0 && size_t(ordinal) < facts.size() &&
      facts[size_t(ordinal)].valid) {
    *out = &facts[size_t(ordinal)];
    return {};
  }
  DeviceInfo info;
  MLAKIT_TRY(current_device_info(&info));
  if (facts.size() <= size_t(info.ordinal)) facts.resize(size_t(info.ordinal) + 1);
  DeviceFacts& f = facts[size_t(info.ordinal)];
  f = DeviceFacts{};
  f.valid = true;
  f.info = info;
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

DecodeParams make_params(const DecodeProblem& p, Workspace ws, int64_t partitions) {
  const WorkspaceLayout w = layout_for(p, partitions);
  uint8_t* base = static_cast<uint8_t*>(ws.data);
  int shift = 0;
  while ((int64_t(1) << shift) < p.kv.page_size()) ++shift;
  DecodeParams d{};
  d.q = p.q.data;
  d.q_stride_b = p.q.stride[0];
  d.q_stride_s = p.q.stride[1];
  d.q_stride_h = p.q.stride[2];
  d.pages = static_cast<const uint8_t*>(p.kv.pages.data);
  d.page_stride_bytes = p.kv.pages.stride[0];
  d.row_stride_bytes = p.kv.pages.stride[1];
  d.page_shift = shift;
  d.block_table = static_cast<const int32_t*>(p.block_table.data);
  d.block_table_stride = p.block_table.stride[0];
  d.seq_lens = static_cast<const int32_t*>(p.seq_lens.data);
  d.seq_lens_stride = p.seq_lens.stride[0];
  d.out = p.out.data;
  d.out_stride_b = p.out.stride[0];
  d.out_stride_s = p.out.stride[1];
  d.out_stride_h = p.out.stride[2];
  d.lse = p.lse.defined() ? static_cast<float*>(p.lse.data) : nullptr;
  if (p.lse.defined()) {
    d.lse_stride_b = p.lse.stride[0];
    d.lse_stride_s = p.lse.stride[1];
    d.lse_stride_h = p.lse.stride[2];
  }
  d.kv_scale = p.kv.kv_scale;
  d.kv_scale_value = p.kv.kv_scale_value;
  d.softmax_scale = p.softmax_scale;
  d.batch = int32_t(p.batch());
  d.s_q = int32_t(p.s_q());
  d.h_q = int32_t(p.h_q());
  d.rows = int32_t(query_rows(p));
  d.causal = p.causal;
  d.partitions = int32_t(partitions);
  d.plan_partitions = reinterpret_cast<const PartitionStart*>(base + w.partitions_off);
  d.plan_requests = reinterpret_cast<const RequestPlan*>(base + w.requests_off);
  d.part_lse = reinterpret_cast<float*>(base + w.part_lse_off);
  d.part_out = reinterpret_cast<float*>(base + w.part_out_off);
  return d;
}

Status launch_plan_for(const DecodeProblem& p, Workspace ws, int64_t partitions, int tile_shift, cudaStream_t stream,
                       bool pdl) {
  MLAKIT_TRY(check_workspace_alignment(ws));
  const WorkspaceLayout w = layout_for(p, partitions);
  uint8_t* base = static_cast<uint8_t*>(ws.data);
  PlanParams pp{};
  pp.seq_lens = static_cast<const int32_t*>(p.seq_lens.data);
  pp.seq_lens_stride = p.seq_lens.stride[0];
  pp.batch = int32_t(p.batch());
  pp.partitions = int32_t(partitions);
  pp.tile_shift = tile_shift;
  pp.partitions_out = reinterpret_cast<PartitionStart*>(base + w.partitions_off);
  pp.requests_out = reinterpret_cast<RequestPlan*>(base + w.requests_off);
  pp.cost_scratch = reinterpret_cast<int64_t*>(base + w.cost_off);
  return launch_plan(pp, stream, pdl);
}

}  // namespace mlakit::cuda::decode
