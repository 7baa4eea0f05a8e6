// Ragged prefill in the non-absorbed form, docs/spec.md section 3. Request b owns queries
// [cu_seqlens_q[b], cu_seqlens_q[b+1]) and keys [cu_seqlens_k[b], cu_seqlens_k[b+1]); with `causal`,
// query i sees keys j <= i + Lk_b - Lq_b (bottom-right aligned). Each request's K and V are converted
// to float32 once and its (query, head) rows then run in parallel.

#include <algorithm>
#include <vector>

#include "reference/ops.h"
#include "reference/parallel.h"
#include "reference/softmax_attention.h"
#include "reference/tensor_access.h"

namespace mlakit::reference {
namespace {

/// Tokens [begin, begin + count) of a [T, h_q, d] tensor as float32 [count, h_q, d].
std::vector<float> load_tokens(const TensorView& t, int64_t begin, int64_t count) {
  const int64_t h_q = t.shape[1], d = t.shape[2];
  std::vector<float> values(static_cast<size_t>(count * h_q * d));
  parallel_for(count, [&](int64_t j) {
    for (int64_t h = 0; h < h_q; ++h) {
      const int64_t src = offset_of(t, begin + j, h);
      float* dst = values.data() + (j * h_q + h) * d;
      for (int64_t c = 0; c < d; ++c) dst[c] = load_float(t, src + c);
    }
  });
  return values;
}

struct RequestRange {
  int64_t q_begin, len_q, k_begin, len_k;
};

RequestRange request_range(const PrefillProblem& p, int64_t b) {
  const auto at = [](const TensorView& cu, int64_t i) { return load_int(cu, offset_of(cu, i)); };
  const int64_t q0 = at(p.cu_seqlens_q, b), k0 = at(p.cu_seqlens_k, b);
  return {q0, at(p.cu_seqlens_q, b + 1) - q0, k0, at(p.cu_seqlens_k, b + 1) - k0};
}

/// Keys query i (0-based within its request) sees: all Lk_b, or j <= i + Lk_b - Lq_b when causal.
int64_t visible_keys(const PrefillProblem& p, const RequestRange& r, int64_t i) {
  if (!p.causal) return r.len_k;
  return std::clamp<int64_t>(i + r.len_k - r.len_q + 1, 0, r.len_k);
}

void prefill_request(const PrefillProblem& p, int64_t b) {
  const int64_t h_q = p.h_q(), d_qk = p.q.shape[2], d_vh = p.v.shape[2];
  const RequestRange r = request_range(p, b);
  const std::vector<float> k = load_tokens(p.k, r.k_begin, r.len_k);
  const std::vector<float> v = load_tokens(p.v, r.k_begin, r.len_k);
  parallel_for(r.len_q * h_q, [&](int64_t ih) {
    const int64_t i = ih / h_q, h = ih % h_q, token = r.q_begin + i;
    const std::vector<float> q = load_floats(p.q, offset_of(p.q, token, h), d_qk);

    const KeyValueRows kv{k.data() + h * d_qk, h_q * d_qk, v.data() + h * d_vh, h_q * d_vh,
                          visible_keys(p, r, i)};
    std::vector<double> out(static_cast<size_t>(d_vh));
    const double lse = softmax_attention(q.data(), d_qk, kv, d_vh, double(p.softmax_scale), out.data());

    const int64_t out_base = offset_of(p.out, token, h);
    for (int64_t c = 0; c < d_vh; ++c) store_float(p.out, out_base + c, float(out[size_t(c)]));
    if (p.lse.defined()) store_float(p.lse, offset_of(p.lse, token, h), float(lse));
  });
}

}  // namespace

Status prefill(const PrefillProblem& p) {
  for (int64_t b = 0; b < p.batch(); ++b) prefill_request(p, b);
  return {};
}

}  // namespace mlakit::reference
