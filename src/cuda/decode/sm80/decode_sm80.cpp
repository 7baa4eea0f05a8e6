// Host entry points of the portable (SM80+) CUDA dense decode (issue 3): what it supports, workspace
// size, plan and run.

#include <cstdint>
#include <vector>

#include "cuda/decode/sm80/config.h"
#include "cuda/decode/sm80/host_sm80.h"
#include "cuda/decode/smxx/host.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace {

constexpr const char* kPath = "cuda decode";

Status shape_for(const DecodeProblem& p, decode::Sm80Shape* s) {
  return decode::sm80_shape(decode::query_rows(p), decode::dense_variant(p), p.device().index, s);
}

}  // namespace

std::vector<Feature> decode_features() {
  return {{OpKind::kDecode,
           "kv=bf16 (q bf16), fp16 (q fp16), fp8_e4m3, fp8_ds_mla (q bf16|fp16); split caches (kv_c, k_pe in two "
           "tensors) for bf16, fp16, fp8_e4m3; d_c=512, d_r=64; P=1,16,32,64,128; block table 2-D or flat with "
           "indptr; h_q=1..128; s_q=1..8 causal|non-causal; any b incl. L=0; device-side split-KV plan; sm_80+"}};
}

Status decode_supports(const DecodeProblem& p) {
  MLAKIT_TRY(decode::check_decode_common(p, kPath, /*split=*/true));
  decode::Sm80Shape s;
  return shape_for(p, &s);  // whether the kernel fits this device (sm80_shape)
}

size_t decode_workspace_bytes(const DecodeProblem& p) {
  decode::Sm80Shape s;  // sized for the tensors' device (its partitions follow that device's SM count)
  if (!shape_for(p, &s).ok()) return 0;
  return decode::layout_for(p, s.partitions).total;
}

Status decode_plan(const DecodeProblem& p, Workspace ws, Stream stream) {
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  decode::Sm80Shape s;
  MLAKIT_TRY(shape_for(p, &s));
  return decode::launch_plan_for(p, ws, s.partitions, decode::kTileShift, static_cast<cudaStream_t>(stream), s.pdl);
}

Status decode_run(const DecodeProblem& p, Workspace ws, Stream stream) {
  MLAKIT_TRY(decode::check_workspace_alignment(ws));
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  decode::Sm80Shape s;
  MLAKIT_TRY(shape_for(p, &s));
  const decode::DecodeParams d = decode::make_params(p, ws, s.partitions);
  return decode::launch_sm80(d, decode::dense_variant(p), s, static_cast<cudaStream_t>(stream));
}

}  // namespace mlakit::cuda
