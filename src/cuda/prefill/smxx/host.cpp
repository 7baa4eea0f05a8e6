#include "cuda/prefill/smxx/host.h"

#include <utility>

#include "cuda/cache/common/host_util.h"

namespace mlakit::cuda::prefill {

PrefillParams make_params(const PrefillProblem& p) {
  constexpr float kLog2e = 1.4426950408889634f;
  PrefillParams params{};
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
  params.scale_log2 = p.softmax_scale * kLog2e;
  params.causal = p.causal;
  return params;
}

Status check_rows(const PrefillProblem& p, const char* why) {
  for (const auto& [t, name] : {std::pair{&p.q, "q"}, {&p.k, "k"}, {&p.v, "v"}, {&p.out, "out"}}) {
    if (t->numel() > 0) MLAKIT_TRY(cache::require_vector_rows(*t, name, 16, why));
  }
  return {};
}

}  // namespace mlakit::cuda::prefill
