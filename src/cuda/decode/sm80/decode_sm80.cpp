// Host entry points of the portable (SM80+) CUDA dense decode (issue 3): what it supports, workspace
// size, plan and run. The one place where runtime values (q dtype, cache format, row groups) become the
// template values of this kernel family.

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/decode/sm80/config.h"
#include "cuda/decode/sm80/launch.h"
#include "cuda/decode/smxx/host.h"
#include "cuda/decode/smxx/launch.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace {

using decode::KvKind;

constexpr const char* kPath = "cuda decode";

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

int row_group_index(int row_groups) { return row_groups == 1 ? 0 : row_groups == 2 ? 1 : 2; }

/// Partitions G of the batch's KV work: one full wave of decode CTAs (row blocks x G = SMs x CTAs/SM).
Status partitions_for(const DecodeProblem& p, int64_t* g, bool* pdl) {
  decode::DeviceFacts* facts = nullptr;
  MLAKIT_TRY(decode::device_facts(&facts));
  const int64_t rows = decode::query_rows(p);
  const bool bf16 = p.q.dtype == DType::kBF16;
  const KvKind kind = decode::kv_kind(p.kv.format);
  const int rg = row_groups_for(rows);
  int& ctas = facts->sm80_ctas[bf16 ? 1 : 0][int(kind)][row_group_index(rg)];
  if (ctas < 1) MLAKIT_TRY(occupancy(bf16, kind, rg, &ctas));
  if (ctas < 1) return Status::internal("decode: the kernel does not fit on an SM of this device");
  *g = std::max<int64_t>(1, int64_t(facts->info.num_sms) * ctas / row_blocks_for(rows));
  if (pdl != nullptr) *pdl = facts->info.sm_major >= 9;  // griddepcontrol needs sm_90
  return {};
}

}  // namespace

std::vector<Feature> decode_features() {
  return {{OpKind::kDecode,
           "kv=bf16 (q bf16), fp16 (q fp16), fp8_e4m3, fp8_ds_mla (q bf16|fp16); d_c=512, d_r=64; P=1,16,32,64,128; "
           "h_q=1..128; s_q=1..8 causal|non-causal; any b incl. L=0; device-side split-KV plan; sm_80+"}};
}

Status decode_supports(const DecodeProblem& p) { return decode::check_decode_common(p, kPath); }

size_t decode_workspace_bytes(const DecodeProblem& p) {
  int64_t g = 0;
  if (!partitions_for(p, &g, nullptr).ok()) return 0;
  return decode::layout_for(p, g).total;
}

Status decode_plan(const DecodeProblem& p, Workspace ws, Stream stream) {
  int64_t g = 0;
  bool pdl = false;
  MLAKIT_TRY(partitions_for(p, &g, &pdl));
  return decode::launch_plan_for(p, ws, g, decode::kTileShift, static_cast<cudaStream_t>(stream), pdl);
}

Status decode_run(const DecodeProblem& p, Workspace ws, Stream stream) {
  MLAKIT_TRY(decode::check_workspace_alignment(ws));
  int64_t g = 0;
  bool pdl = false;
  MLAKIT_TRY(partitions_for(p, &g, &pdl));
  const decode::DecodeParams d = decode::make_params(p, ws, g);
  const bool bf16 = p.q.dtype == DType::kBF16;
  const int rg = row_groups_for(decode::query_rows(p));
  const int rb = int(row_blocks_for(decode::query_rows(p)));
  cudaStream_t s = static_cast<cudaStream_t>(stream);
  Status st;
  switch (decode::kv_kind(p.kv.format)) {
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
