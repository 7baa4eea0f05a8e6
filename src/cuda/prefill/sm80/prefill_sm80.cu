// The portable ragged prefill (issue 10) on the "cuda" backend: supports rules, parameter packing, launch.

#include <string>

#include "cuda/cache/common/host_util.h"
#include "cuda/common/check.h"
#include "cuda/ops.h"
#include "cuda/prefill/sm80/kernel.cuh"

namespace mlakit::cuda {
namespace prefill {
namespace {

const char* const kWhy = "16-byte cp.async rows of the cuda prefill kernel";
constexpr int64_t kMaxGridX = 2147483647;
constexpr float kLog2e = 1.4426950408889634f;

/// The (d_qk, d_v) pairs compiled: MLA's 192/128 and the plain 128/128 and 64/64.
bool dims_compiled(int64_t d_qk, int64_t d_v) {
  return (d_qk == 192 && d_v == 128) || (d_qk == 128 && d_v == 128) || (d_qk == 64 && d_v == 64);
}

int64_t grid_slots(const PrefillProblem& p) { return p.q.shape[0] / kBlockM + p.batch(); }

template <bool kBf16, int kDQK, int kDV>
Status launch(const PrefillParams& params, int64_t slots, int h_q, cudaStream_t stream) {
  auto kernel = prefill_kernel<kBf16, kDQK, kDV>;
  constexpr int kSmem = PrefillSmem<kDQK, kDV>::total;
  MLAKIT_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
  kernel<<<dim3(unsigned(slots), unsigned(h_q)), kThreads, kSmem, stream>>>(params);
  MLAKIT_CUDA_TRY_LAUNCH("prefill_kernel");
  return {};
}

template <bool kBf16>
Status dispatch_dims(const PrefillParams& params, int64_t slots, int h_q, int64_t d_qk, int64_t d_v,
                     cudaStream_t stream) {
  if (d_qk == 192) return launch<kBf16, 192, 128>(params, slots, h_q, stream);
  if (d_qk == 128) return launch<kBf16, 128, 128>(params, slots, h_q, stream);
  (void)d_v;
  return launch<kBf16, 64, 64>(params, slots, h_q, stream);
}

}  // namespace
}  // namespace prefill

std::vector<Feature> prefill_features() {
  return {{OpKind::kPrefill,
           "portable (mma.sync, SM80+): bf16,fp16; (d_qk, d_v) = (192, 128), (128, 128), (64, 64); causal "
           "bottom-right or not; ragged, no host sync; rows that see no key give out 0 and lse -inf"}};
}

Status prefill_supports(const PrefillProblem& p) {
  using namespace cache;
  const int64_t d_qk = p.q.shape[2], d_v = p.v.shape[2];
  if (!prefill::dims_compiled(d_qk, d_v)) {
    return unsupported("(d_qk, d_v)", "(" + std::to_string(d_qk) + ", " + std::to_string(d_v) + ")",
                       "the cuda prefill kernel is compiled for (192, 128), (128, 128) and (64, 64)");
  }
  for (const auto& [t, name] : {std::pair{&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}, {&p.out, "out"}}) {
    if (t->numel() > 0) MLAKIT_TRY(require_vector_rows(*t, name, 16, prefill::kWhy));
  }
  if (prefill::grid_slots(p) > prefill::kMaxGridX) {
    return unsupported("T_q", p.q.shape[0], "must leave T_q / 64 + b below 2^31 (grid size)");
  }
  return {};
}

Status prefill_run(const PrefillProblem& p, Stream stream) {
  using namespace cache;
  if (p.q.shape[0] == 0) return {};
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  prefill::PrefillParams params{};
  params.q = static_cast<const uint8_t*>(p.q.data);
  params.k = static_cast<const uint8_t*>(p.k.data);
  params.v = static_cast<const uint8_t*>(p.v.data);
  params.out = static_cast<uint8_t*>(p.out.data);
  params.lse = p.lse.defined() ? p.lse.ptr<float>() : nullptr;
  params.cu_q = p.cu_seqlens_q.ptr<const int32_t>();
  params.cu_k = p.cu_seqlens_k.ptr<const int32_t>();
  params.q_stride_t = p.q.stride[0];
  params.q_stride_h = p.q.stride[1];
  params.k_stride_t = p.k.stride[0];
  params.k_stride_h = p.k.stride[1];
  params.v_stride_t = p.v.stride[0];
  params.v_stride_h = p.v.stride[1];
  params.out_stride_t = p.out.stride[0];
  params.out_stride_h = p.out.stride[1];
  params.lse_stride_t = p.lse.defined() ? p.lse.stride[0] : 0;
  params.lse_stride_h = p.lse.defined() ? p.lse.stride[1] : 0;
  params.cu_q_stride = p.cu_seqlens_q.stride[0];
  params.cu_k_stride = p.cu_seqlens_k.stride[0];
  params.t_q = p.q.shape[0];
  params.t_k = p.k.shape[0];
  params.batch = int32_t(p.batch());
  params.scale_log2 = p.softmax_scale * prefill::kLog2e;
  params.causal = p.causal;
  const int64_t slots = prefill::grid_slots(p);
  const int h_q = int(p.h_q());
  const cudaStream_t s = to_cuda(stream);
  return p.q.dtype == DType::kBF16 ? prefill::dispatch_dims<true>(params, slots, h_q, p.q.shape[2], p.v.shape[2], s)
                                   : prefill::dispatch_dims<false>(params, slots, h_q, p.q.shape[2], p.v.shape[2], s);
}

}  // namespace mlakit::cuda
