// Host entry points of the portable (SM80+) CUDA sparse decode (issue 9, docs/spec.md section 2): the dense kernel
// family with kSparse, whose plan requests are the b x s_q query tokens and whose KV "tokens" are index
// columns. run = plan + kernel + combine, all on the device: no host synchronisation, graph capturable.

#include <cstdint>
#include <vector>

#include "cuda/decode/sm80/config.h"
#include "cuda/decode/sm80/host_sm80.h"
#include "cuda/decode/smxx/host.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace {

constexpr const char* kPath = "cuda sparse_decode";

decode::Sm80Variant variant_of(const SparseDecodeProblem& p) {
  return {p.q.dtype == DType::kBF16, decode::kv_kind(p.kv.format), /*sparse=*/true, p.kv.dims.v_whole_row};
}

Status shape_for(const SparseDecodeProblem& p, decode::Sm80Shape* s) {
  return decode::sm80_shape(p.h_q(), variant_of(p), p.device().index, s);
}

}  // namespace

std::vector<Feature> sparse_decode_features() {
  return {{OpKind::kSparseDecode,
           "kv=bf16 (q bf16), fp16 (q fp16), fp8_e4m3, fp8_ds_mla (q bf16|fp16); d_c=512, d_r=64; "
           "DeepSeek V4 (d_c=448, d_r=64, whole-row V, q bf16): kv=bf16, fp8_e4m3, fp8_ds_v4, extra cache; any P; "
           "h_q=1..128; s_q=1..8; any topk, topk_length, attn_sink, max_logits; ids past the cache "
           "skipped; b x s_q up to 2^31-1 (prefill as b = tokens); device-side split plan; sm_80+"}};
}

Status sparse_decode_supports(const SparseDecodeProblem& p) {
  MLAKIT_TRY(decode::check_sparse_common(p, kPath));
  decode::Sm80Shape s;
  return shape_for(p, &s);  // whether the kernel fits this device (sm80_shape)
}

size_t sparse_decode_workspace_bytes(const SparseDecodeProblem& p) {
  decode::Sm80Shape s;  // sized for the tensors' device (its partitions follow that device's SM count)
  if (!shape_for(p, &s).ok()) return 0;
  return decode::layout_for(p, s.partitions).total;
}

Status sparse_decode_run(const SparseDecodeProblem& p, Workspace ws, Stream stream) {
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  decode::Sm80Shape s;
  MLAKIT_TRY(shape_for(p, &s));
  const cudaStream_t cs = static_cast<cudaStream_t>(stream);
  decode::DecodeParams d;
  MLAKIT_TRY(decode::sparse_schedule(p, ws, s.partitions, decode::kTileShift, cs, s.pdl, &d));
  return decode::launch_sm80(d, variant_of(p), s, cs);
}

}  // namespace mlakit::cuda
