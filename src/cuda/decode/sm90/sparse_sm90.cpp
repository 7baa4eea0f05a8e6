// Host entry points of the Hopper (sm_90a) sparse decode (issue 9, docs/spec.md section 2; DeepSeek V4, issue 13,
// section 2.1): the Hopper kernel with kSparse, whose producer gathers each tile's rows through indices with cp.async
// (no TMA: the rows are scattered). Plan, combine, parameters and checks are the portable sparse path's (smxx/).

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/host_sm90.h"
#include "cuda/decode/smxx/host.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace {

constexpr const char* kPath = "cuda_sm90 sparse_decode";

}  // namespace

std::vector<Feature> sparse_decode_sm90_features() {
  return {{OpKind::kSparseDecode,
           "kv=bf16 (q bf16), fp16 (q fp16), fp8_e4m3, fp8_ds_mla (q bf16|fp16); d_c=512, d_r=64; "
           "DeepSeek V4 (d_c=448, d_r=64, whole-row V, q bf16): kv=bf16, fp8_e4m3, fp8_ds_v4; extra cache; fp8 from "
           "h_q >= 17; any P; h_q=1..128; s_q=1..8; any topk, topk_length, attn_sink, max_logits; ids past the cache "
           "skipped; 16-bit rows gathered by cp.async, fp8 rows dequantised by the producer, into the wgmma pipeline; "
           "sm_90a"}};
}

Status sparse_decode_sm90_supports(const SparseDecodeProblem& p) {
  MLAKIT_TRY(decode::check_sparse_common(p, kPath));
  return decode::sm90::check_fp8_rows(p.kv.format, p.h_q(), kPath);
}

size_t sparse_decode_sm90_workspace_bytes(const SparseDecodeProblem& p) {
  int64_t g = 0;  // sized for the tensors' device (its partitions follow that device's SM count)
  if (!decode::sm90::partitions_for(p.h_q(), p.device().index, &g).ok()) return 0;
  return decode::layout_for(p, g).total;
}

Status sparse_decode_sm90_run(const SparseDecodeProblem& p, Workspace ws, Stream stream) {
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  int64_t g = 0;
  MLAKIT_TRY(decode::sm90::partitions_for(p.h_q(), p.device().index, &g));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  decode::DecodeParams d;
  MLAKIT_TRY(decode::sparse_schedule(p, ws, g, decode::sm90::kTileShift, s, true, &d));
  const CUtensorMap unused{};
  return decode::sm90::launch_sm90(d, p.q.dtype == DType::kBF16, decode::kv_kind(p.kv.format), /*sparse=*/true,
                                   p.kv.dims.v_whole_row, unused, false, p.h_q(), s);
}

}  // namespace mlakit::cuda
