#include "common/prefill_case.h"

#include <algorithm>
#include <cmath>

#include "common/decode_case.h"
#include "mlakit/numeric.h"

namespace mlakit::test {

PrefillCase PrefillCase::generate(const PrefillCaseConfig& cfg) {
  PrefillCase c;
  c.cfg = cfg;
  c.cu_q = {0};
  c.cu_k = {0};
  for (auto [lq, lk] : cfg.lens) {
    c.cu_q.push_back(c.cu_q.back() + lq);
    c.cu_k.push_back(c.cu_k.back() + lk);
  }
  c.t_q = c.cu_q.back();
  c.t_k = c.cu_k.back();
  std::mt19937_64 rng(cfg.seed);
  c.q = c.random_tokens(rng, c.t_q, cfg.geometry.d_qk);
  c.k = c.random_tokens(rng, c.t_k, cfg.geometry.d_qk);
  c.v = c.random_tokens(rng, c.t_k, cfg.geometry.d_vh);
  c.out.assign(size_t(c.t_q * cfg.h_q * cfg.geometry.d_vh), kPoison16);
  c.lse.assign(size_t(c.t_q * cfg.h_q), NAN);
  return c;
}

std::vector<uint16_t> PrefillCase::random_tokens(std::mt19937_64& rng, int64_t tokens, int64_t d) const {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<uint16_t> bits(size_t(std::max<int64_t>(1, tokens * token_stride(d))), kPoison16);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t e = 0; e < cfg.h_q * d; ++e) {
      const float x = dist(rng);
      bits[size_t(t * token_stride(d) + e)] = cfg.dtype == DType::kFP16 ? float_to_fp16(x) : float_to_bf16(x);
    }
  }
  return bits;
}

PrefillProblem PrefillCase::problem() {
  const auto strided = [&](const std::vector<uint16_t>& bits, int64_t tokens, int64_t d) {
    TensorView t = TensorView::contiguous(bits.data(), cfg.dtype, {tokens, cfg.h_q, d});
    t.stride[0] = token_stride(d);
    if (cfg.in_head_stride != 0) t.stride[1] = cfg.in_head_stride;  // values stay at h * d: h_q = 1 only
    return t;
  };
  PrefillProblem p;
  p.q = strided(q, t_q, cfg.geometry.d_qk);
  p.k = strided(k, t_k, cfg.geometry.d_qk);
  p.v = strided(v, t_k, cfg.geometry.d_vh);
  const int64_t b = int64_t(cfg.lens.size());
  p.cu_seqlens_q = TensorView::contiguous(cu_q.data(), DType::kInt32, {b + 1});
  p.cu_seqlens_k = TensorView::contiguous(cu_k.data(), DType::kInt32, {b + 1});
  p.out = TensorView::contiguous(out.data(), cfg.dtype, {t_q, cfg.h_q, cfg.geometry.d_vh});
  if (cfg.out_head_stride != 0) p.out.stride[1] = cfg.out_head_stride;
  p.lse = TensorView::contiguous(lse.data(), DType::kFP32, {t_q, cfg.h_q});
  p.softmax_scale = kDeepSeekSoftmaxScale;
  p.causal = cfg.causal;
  return p;
}

double PrefillCase::value(const std::vector<uint16_t>& bits, int64_t token, int64_t h, int64_t d, int64_t c) const {
  return oracle_half_to_double(bits[size_t(token * token_stride(d) + h * d + c)], cfg.dtype);
}

std::string describe(const PrefillCaseConfig& cfg) {
  std::string s = std::string("dtype=") + dtype_name(cfg.dtype) + " h_q=" + std::to_string(cfg.h_q) +
                  " d_qk=" + std::to_string(cfg.geometry.d_qk) + " d_vh=" + std::to_string(cfg.geometry.d_vh) +
                  " causal=" + (cfg.causal ? "1" : "0") + " token_padding=" + std::to_string(cfg.token_padding) +
                  " out_head_stride=" + std::to_string(cfg.out_head_stride) + " in_head_stride=" +
                  std::to_string(cfg.in_head_stride) + " seed=" + std::to_string(cfg.seed) + " lens=";
  for (auto [lq, lk] : cfg.lens) s += "(" + std::to_string(lq) + "," + std::to_string(lk) + ")";
  return s;
}

}  // namespace mlakit::test
