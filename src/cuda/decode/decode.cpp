// Host entry points of the CUDA dense decode (issue 3): what it supports, workspace size, plan and run.
// The one place where runtime values (q dtype, cache format, row groups) become template values.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/decode/config.h"
#include "cuda/decode/launch.h"
#include "cuda/decode/params.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace {

using decode::KvKind;

/// Page sizes the kernels are tested for (issue 3); anything else is refused by name.
constexpr int64_t kPageSizes[] = {1, 16, 32, 64, 128};
constexpr const char* kPageSizesText = "1, 16, 32, 64 or 128";
/// Alignment of q rows, out rows and cache rows: cp.async and vector stores move 16 bytes.
constexpr int64_t kAlignBytes = 16;
constexpr int64_t kAlignElems16 = kAlignBytes / 2;

KvKind kv_kind(KvFormat f) {
  switch (f) {
    case KvFormat::kFP8E4M3: return KvKind::kE4M3;
    case KvFormat::kFP8DsMla: return KvKind::kDsMla;
    default: return KvKind::k16Bit;
  }
}

int64_t query_rows(const DecodeProblem& p) { return p.s_q() * p.h_q(); }

/// Row groups of 16 query rows per CTA: 1 for <= 16 rows, 2 for <= 32, else 4 (64 rows per CTA:
/// 128 heads x s_q = 1 gives 2 row blocks per request).
int row_groups_for(int64_t rows) {
  if (rows <= decode::kRowsPerGroup) return 1;
  if (rows <= 2 * decode::kRowsPerGroup) return 2;
  return decode::kMaxRowGroups;
}

int64_t row_blocks_for(int64_t rows) {
  const int64_t per_cta = int64_t(row_groups_for(rows)) * decode::kRowsPerGroup;
  return (rows + per_cta - 1) / per_cta;
}

Status occupancy(bool bf16, KvKind kind, int row_groups, int* ctas) {
  switch (kind) {
    case KvKind::k16Bit:
      return bf16 ? decode::decode_occupancy<true, KvKind::k16Bit>(row_groups, ctas)
                  : decode::decode_occupancy<false, KvKind::k16Bit>(row_groups, ctas);
    case KvKind::kE4M3:
      return bf16 ? decode::decode_occupancy<true, KvKind::kE4M3>(row_groups, ctas)
                  : decode::decode_occupancy<false, KvKind::kE4M3>(row_groups, ctas);
    case KvKind::kDsMla:
      return bf16 ? decode::decode_occupancy<true, KvKind::kDsMla>(row_groups, ctas)
                  : decode::decode_occupancy<false, KvKind::kDsMla>(row_groups, ctas);
  }
  return Status::internal("decode: unknown kv kind");
}

/// What partitions_for needs from the runtime, looked up once per (thread, device): plan and run are
/// called for every layer of every step, and the queries (5 device attributes, a function attribute and
/// an occupancy calculation per call) cost the host several microseconds that a GPU waiting on a short
/// step (b = 1: ~0.09 ms) sees as idle time. Device properties and a kernel's occupancy never change.
struct DeviceFacts {
  bool valid = false;
  DeviceInfo info;
  int ctas[2][3][3] = {};  // [bf16][KvKind][row groups 1, 2, 4]; 0 = not looked up yet
};

int row_group_index(int row_groups) { return row_groups == 1 ? 0 : row_groups == 2 ? 1 : 2; }

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

/// Partitions G of the batch's KV work: one full wave of decode CTAs (row blocks x G = SMs x CTAs/SM).
Status partitions_for(const DecodeProblem& p, int64_t* g, bool* pdl) {
  DeviceFacts* facts = nullptr;
  MLAKIT_TRY(device_facts(&facts));
  const int64_t rows = query_rows(p);
  const bool bf16 = p.q.dtype == DType::kBF16;
  const KvKind kind = kv_kind(p.kv.format);
  const int rg = row_groups_for(rows);
  int& ctas = facts->ctas[bf16 ? 1 : 0][int(kind)][row_group_index(rg)];
  if (ctas < 1) MLAKIT_TRY(occupancy(bf16, kind, rg, &ctas));
  if (ctas < 1) return Status::internal("decode: the kernel does not fit on an SM of this device");
  *g = std::max<int64_t>(1, int64_t(facts->info.num_sms) * ctas / row_blocks_for(rows));
  if (pdl != nullptr) *pdl = facts->info.sm_major >= 9;  // griddepcontrol needs sm_90
  return {};
}

decode::WorkspaceLayout layout_for(const DecodeProblem& p, int64_t g) {
  return decode::workspace_layout(p.batch(), query_rows(p), g);
}

bool aligned(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kAlignBytes == 0; }

Status check_rows_16(const TensorView& t, const char* name) {
  if (!aligned(t.data)) {
    return Status::not_supported(std::string(name) + ".data: must be 16-byte aligned (cuda decode moves 16-byte vectors)");
  }
  for (int d = 0; d < t.ndim - 1; ++d) {
    if (t.stride[d] % kAlignElems16 != 0) {
      return Status::not_supported(std::string(name) + ".stride[" + std::to_string(d) + "]=" + std::to_string(t.stride[d]) +
                                   ": must be a multiple of " + std::to_string(kAlignElems16) +
                                   " elements (16-byte aligned rows) for cuda decode");
    }
  }
  return {};
}

}  // namespace

std::vector<Feature> decode_features() {
  return {{OpKind::kDecode,
           "kv=bf16 (q bf16), fp16 (q fp16), fp8_e4m3, fp8_ds_mla (q bf16|fp16); d_c=512, d_r=64; P=1,16,32,64,128; "
           "h_q=1..128; s_q=1..8 causal|non-causal; any b incl. L=0; device-side split-KV plan; sm_80+"}};
}

Status decode_supports(const DecodeProblem& p) {
  if (p.kv.dims.d_c != decode::kDimC) {
    return Status::not_supported("kv.dims.d_c=" + std::to_string(p.kv.dims.d_c) + ": cuda decode implements d_c=" +
                                 std::to_string(decode::kDimC) + " only");
  }
  if (p.kv.dims.d_r != decode::kDimR) {
    return Status::not_supported("kv.dims.d_r=" + std::to_string(p.kv.dims.d_r) + ": cuda decode implements d_r=" +
                                 std::to_string(decode::kDimR) + " only");
  }
  const int64_t ps = p.kv.page_size();
  bool page_ok = false;
  for (int64_t v : kPageSizes) page_ok = page_ok || v == ps;
  if (!page_ok) {
    return Status::not_supported("kv.page_size=" + std::to_string(ps) + ": cuda decode supports page sizes " +
                                 kPageSizesText);
  }
  if (p.kv.format == KvFormat::kBF16 && p.q.dtype != DType::kBF16) {
    return Status::not_supported(std::string("q.dtype=") + dtype_name(p.q.dtype) +
                                 ": cuda decode needs q in bf16 for a bf16 cache (the mma operands share one type)");
  }
  if (p.kv.format == KvFormat::kFP16 && p.q.dtype != DType::kFP16) {
    return Status::not_supported(std::string("q.dtype=") + dtype_name(p.q.dtype) +
                                 ": cuda decode needs q in fp16 for an fp16 cache (the mma operands share one type)");
  }
  MLAKIT_TRY(check_rows_16(p.q, "q"));
  MLAKIT_TRY(check_rows_16(p.out, "out"));
  if (!aligned(p.kv.pages.data)) {
    return Status::not_supported("kv.pages.data: must be 16-byte aligned (cuda decode copies 16-byte pieces)");
  }
  for (int d = 0; d < 2; ++d) {
    if (p.kv.pages.stride[d] % kAlignBytes != 0) {
      return Status::not_supported("kv.pages.stride[" + std::to_string(d) + "]=" + std::to_string(p.kv.pages.stride[d]) +
                                   ": must be a multiple of 16 bytes for cuda decode");
    }
  }
  if (!p.block_table.device.is_cuda() || !p.seq_lens.device.is_cuda()) {
    return Status::not_supported("block_table and seq_lens: must be on the CUDA device (the plan reads them there)");
  }
  return {};
}

size_t decode_workspace_bytes(const DecodeProblem& p) {
  int64_t g = 0;
  if (!partitions_for(p, &g, nullptr).ok()) return 0;
  return layout_for(p, g).total;
}

namespace {

decode::DecodeParams make_params(const DecodeProblem& p, Workspace ws, int64_t g) {
  const decode::WorkspaceLayout w = layout_for(p, g);
  uint8_t* base = static_cast<uint8_t*>(ws.data);
  int shift = 0;
  while ((int64_t(1) << shift) < p.kv.page_size()) ++shift;
  decode::DecodeParams d{};
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
  d.partitions = int32_t(g);
  d.plan_partitions = reinterpret_cast<const decode::PartitionStart*>(base + w.partitions_off);
  d.plan_requests = reinterpret_cast<const decode::RequestPlan*>(base + w.requests_off);
  d.part_lse = reinterpret_cast<float*>(base + w.part_lse_off);
  d.part_out = reinterpret_cast<float*>(base + w.part_out_off);
  return d;
}

Status check_workspace_alignment(Workspace ws) {
  if (!aligned(ws.data)) return Status::invalid("workspace.data: must be 16-byte aligned (cudaMalloc memory is)");
  return {};
}

}  // namespace

Status decode_plan(const DecodeProblem& p, Workspace ws, Stream stream) {
  MLAKIT_TRY(check_workspace_alignment(ws));
  int64_t g = 0;
  bool pdl = false;
  MLAKIT_TRY(partitions_for(p, &g, &pdl));
  const decode::WorkspaceLayout w = layout_for(p, g);
  uint8_t* base = static_cast<uint8_t*>(ws.data);
  decode::PlanParams pp{};
  pp.seq_lens = static_cast<const int32_t*>(p.seq_lens.data);
  pp.seq_lens_stride = p.seq_lens.stride[0];
  pp.batch = int32_t(p.batch());
  pp.partitions = int32_t(g);
  pp.partitions_out = reinterpret_cast<decode::PartitionStart*>(base + w.partitions_off);
  pp.requests_out = reinterpret_cast<decode::RequestPlan*>(base + w.requests_off);
  pp.cost_scratch = reinterpret_cast<int64_t*>(base + w.cost_off);
  return decode::launch_plan(pp, static_cast<cudaStream_t>(stream), pdl);
}

Status decode_run(const DecodeProblem& p, Workspace ws, Stream stream) {
  MLAKIT_TRY(check_workspace_alignment(ws));
  int64_t g = 0;
  bool pdl = false;
  MLAKIT_TRY(partitions_for(p, &g, &pdl));
  const decode::DecodeParams d = make_params(p, ws, g);
  const bool bf16 = p.q.dtype == DType::kBF16;
  const int rg = row_groups_for(query_rows(p));
  const int rb = int(row_blocks_for(query_rows(p)));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  Status st;
  switch (kv_kind(p.kv.format)) {
    case KvKind::k16Bit:
      st = bf16 ? decode::launch_decode_kernel<true, KvKind::k16Bit>(d, rg, rb, s, pdl)
                : decode::launch_decode_kernel<false, KvKind::k16Bit>(d, rg, rb, s, pdl);
      break;
    case KvKind::kE4M3:
      st = bf16 ? decode::launch_decode_kernel<true, KvKind::kE4M3>(d, rg, rb, s, pdl)
                : decode::launch_decode_kernel<false, KvKind::kE4M3>(d, rg, rb, s, pdl);
      break;
    case KvKind::kDsMla:
      st = bf16 ? decode::launch_decode_kernel<true, KvKind::kDsMla>(d, rg, rb, s, pdl)
                : decode::launch_decode_kernel<false, KvKind::kDsMla>(d, rg, rb, s, pdl);
      break;
  }
  MLAKIT_TRY(st);
  return decode::launch_combine(d, bf16, s, pdl);
}

}  // namespace mlakit::cuda
