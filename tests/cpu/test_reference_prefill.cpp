// The CPU reference's ragged prefill (docs/spec.md section 3) against dense attention computed here in
// float64: ragged requests (including ones with no queries), causal bottom-right alignment, strided
// token rows with NaN-poisoned padding, poisoned outputs, natural-log LSE.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "mlakit/numeric.h"
#include "mlakit/registry.h"
#include "reference/ops.h"

namespace mlakit {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Geometry {
  int64_t d_qk;  // d_nope + d_r
  int64_t d_vh;
};

struct PrefillCaseConfig {
  std::vector<std::pair<int32_t, int32_t>> lens;  // (Lq_b, Lk_b) per request, Lk_b >= Lq_b
  int64_t h_q = 2;
  Geometry geometry{192, 128};  // DeepSeek MHA 192/128
  DType dtype = DType::kBF16;
  bool causal = false;
  int64_t token_padding = 8;    // extra poisoned elements after each token's h_q * d values
  uint64_t seed = 1;
};

/// Host buffers of one prefill call; q, k, v have token stride h_q * d + token_padding.
struct PrefillCase {
  PrefillCaseConfig cfg;
  int64_t t_q = 0, t_k = 0;
  std::vector<int32_t> cu_q, cu_k;
  std::vector<uint16_t> q, k, v, out;
  std::vector<float> lse;

  static PrefillCase generate(const PrefillCaseConfig& cfg) {
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
    c.out.assign(size_t(c.t_q * cfg.h_q * cfg.geometry.d_vh), test::kPoison16);
    c.lse.assign(size_t(c.t_q * cfg.h_q), NAN);
    return c;
  }

  int64_t token_stride(int64_t d) const { return cfg.h_q * d + cfg.token_padding; }

  std::vector<uint16_t> random_tokens(std::mt19937_64& rng, int64_t tokens, int64_t d) const {
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<uint16_t> bits(size_t(std::max<int64_t>(1, tokens * token_stride(d))), test::kPoison16);
    for (int64_t t = 0; t < tokens; ++t) {
      for (int64_t e = 0; e < cfg.h_q * d; ++e) {
        const float x = dist(rng);
        bits[size_t(t * token_stride(d) + e)] = cfg.dtype == DType::kFP16 ? float_to_fp16(x) : float_to_bf16(x);
      }
    }
    return bits;
  }

  TensorView strided(const std::vector<uint16_t>& bits, int64_t tokens, int64_t d) const {
    TensorView t = TensorView::contiguous(bits.data(), cfg.dtype, {tokens, cfg.h_q, d});
    t.stride[0] = token_stride(d);
    return t;
  }

  PrefillProblem problem() {
    PrefillProblem p;
    p.q = strided(q, t_q, cfg.geometry.d_qk);
    p.k = strided(k, t_k, cfg.geometry.d_qk);
    p.v = strided(v, t_k, cfg.geometry.d_vh);
    const int64_t b = int64_t(cfg.lens.size());
    p.cu_seqlens_q = TensorView::contiguous(cu_q.data(), DType::kInt32, {b + 1});
    p.cu_seqlens_k = TensorView::contiguous(cu_k.data(), DType::kInt32, {b + 1});
    p.out = TensorView::contiguous(out.data(), cfg.dtype, {t_q, cfg.h_q, cfg.geometry.d_vh});
    p.lse = TensorView::contiguous(lse.data(), DType::kFP32, {t_q, cfg.h_q});
    p.softmax_scale = test::kDeepSeekSoftmaxScale;
    p.causal = cfg.causal;
    return p;
  }

  double value(const std::vector<uint16_t>& bits, int64_t token, int64_t h, int64_t d, int64_t c) const {
    return test::oracle_half_to_double(bits[size_t(token * token_stride(d) + h * d + c)], cfg.dtype);
  }
};

struct OracleResult {
  std::vector<float> out, lse, row_vmax;
};

/// Dense attention per request and head in float64, with the bottom-right causal rule of docs/spec.md 3.
OracleResult oracle_prefill(const PrefillCase& c) {
  const auto& cfg = c.cfg;
  const int64_t d_qk = cfg.geometry.d_qk, d_vh = cfg.geometry.d_vh;
  OracleResult r;
  r.out.resize(size_t(c.t_q * cfg.h_q * d_vh));
  r.lse.resize(size_t(c.t_q * cfg.h_q));
  r.row_vmax.resize(size_t(c.t_q * cfg.h_q));
  for (size_t b = 0; b < cfg.lens.size(); ++b) {
    const int64_t lq = cfg.lens[b].first, lk = cfg.lens[b].second, q0 = c.cu_q[b], k0 = c.cu_k[b];
    for (int64_t i = 0; i < lq; ++i) {
      const int64_t n = cfg.causal ? std::min(lk, i + (lk - lq) + 1) : lk;  // keys j <= i + Lk - Lq
      for (int64_t h = 0; h < cfg.h_q; ++h) {
        std::vector<double> s(static_cast<size_t>(n));
        double m = -kInf, vmax = 0;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d_qk; ++e) dot += c.value(c.q, q0 + i, h, d_qk, e) * c.value(c.k, k0 + j, h, d_qk, e);
          s[size_t(j)] = double(test::kDeepSeekSoftmaxScale) * dot;
          m = std::max(m, s[size_t(j)]);
        }
        double denom = 0;
        std::vector<double> acc(static_cast<size_t>(d_vh), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          const double w = std::exp(s[size_t(j)] - m);
          denom += w;
          for (int64_t e = 0; e < d_vh; ++e) {
            const double v = c.value(c.v, k0 + j, h, d_vh, e);
            acc[size_t(e)] += w * v;
            vmax = std::max(vmax, std::fabs(v));
          }
        }
        const int64_t row = (q0 + i) * cfg.h_q + h;
        for (int64_t e = 0; e < d_vh; ++e) r.out[size_t(row * d_vh + e)] = n > 0 ? float(acc[size_t(e)] / denom) : 0.0f;
        r.lse[size_t(row)] = n > 0 ? float(m + std::log(denom)) : float(-kInf);
        r.row_vmax[size_t(row)] = float(vmax);
      }
    }
  }
  return r;
}

std::string describe(const PrefillCaseConfig& cfg) {
  std::string s = std::string("dtype=") + dtype_name(cfg.dtype) + " h_q=" + std::to_string(cfg.h_q) +
                  " d_qk=" + std::to_string(cfg.geometry.d_qk) + " d_vh=" + std::to_string(cfg.geometry.d_vh) +
                  " causal=" + (cfg.causal ? "1" : "0") + " seed=" + std::to_string(cfg.seed) + " lens=";
  for (auto [lq, lk] : cfg.lens) {
    s += '(';
    s += std::to_string(lq);
    s += ',';
    s += std::to_string(lk);
    s += ')';
  }
  return s;
}

void expect_matches_oracle(PrefillCase& c) {
  const Status st = reference::prefill(c.problem());
  ASSERT_TRUE(st.ok()) << st.to_string();
  const OracleResult ref = oracle_prefill(c);
  EXPECT_TRUE(test::check_out(test::to_floats(c.out, c.cfg.dtype), ref.out, ref.row_vmax, c.cfg.geometry.d_vh,
                              test::reference_rounding_tolerance(c.cfg.dtype)));
  EXPECT_TRUE(test::check_lse(c.lse, ref.lse));
}

using PrefillParams = std::tuple<DType, bool /*causal*/, int64_t /*h_q*/, int /*geometry index*/>;
class PrefillOracle : public ::testing::TestWithParam<PrefillParams> {};

constexpr Geometry kGeometries[] = {{192, 128}, {24, 16}, {64, 8}};

TEST_P(PrefillOracle, MatchesFloat64DenseAttention) {
  const auto [dtype, causal, h_q, geometry] = GetParam();
  PrefillCaseConfig cfg;
  cfg.dtype = dtype;
  cfg.causal = causal;
  cfg.h_q = h_q;
  cfg.geometry = kGeometries[geometry];
  // Requests with no queries, Lq == Lk (plain causal), Lq < Lk (bottom-right offset), one query.
  cfg.lens = {{0, 0}, {0, 4}, {1, 1}, {3, 10}, {7, 7}, {5, 40}, {1, 33}};
  cfg.seed = 70 + uint64_t(dtype) * 10 + uint64_t(h_q) + (causal ? 5 : 0) + uint64_t(geometry) * 100;
  SCOPED_TRACE(describe(cfg));
  PrefillCase c = PrefillCase::generate(cfg);
  expect_matches_oracle(c);
}

INSTANTIATE_TEST_SUITE_P(Ragged, PrefillOracle,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16), ::testing::Bool(),
                                            ::testing::Values(int64_t{1}, int64_t{3}), ::testing::Values(0, 1, 2)));

// With Lq == Lk and causal, the first query of a request sees exactly one key: its output is that
// key's V row (rounded) and its LSE is the single score.
TEST(PrefillCausal, FirstQuerySeesOnlyFirstKey) {
  PrefillCaseConfig cfg;
  cfg.causal = true;
  cfg.lens = {{4, 4}, {6, 6}};
  cfg.geometry = {24, 16};
  PrefillCase c = PrefillCase::generate(cfg);
  ASSERT_TRUE(reference::prefill(c.problem()).ok());
  for (size_t b = 0; b < cfg.lens.size(); ++b) {
    const int64_t token = c.cu_q[b], key = c.cu_k[b];
    for (int64_t h = 0; h < cfg.h_q; ++h) {
      for (int64_t e = 0; e < cfg.geometry.d_vh; ++e) {
        const uint16_t got = c.out[size_t((token * cfg.h_q + h) * cfg.geometry.d_vh + e)];
        EXPECT_EQ(got, c.v[size_t(key * c.token_stride(cfg.geometry.d_vh) + h * cfg.geometry.d_vh + e)])
            << "request " << b << " head " << h << " col " << e;
      }
    }
  }
}

TEST(PrefillThroughBackend, RegistryReferenceMatchesDirectCall) {
  const Registry registry = make_default_registry();
  const Backend* backend = registry.get("reference");
  ASSERT_NE(backend, nullptr);
  PrefillCaseConfig cfg;
  cfg.causal = true;
  cfg.lens = {{2, 9}, {0, 3}, {5, 5}};
  PrefillCase direct = PrefillCase::generate(cfg);
  PrefillCase via = direct;
  ASSERT_TRUE(reference::prefill(direct.problem()).ok());
  const Status st = backend->run(via.problem(), nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(direct.out, via.out);
  EXPECT_EQ(direct.lse, via.lse);
}

}  // namespace
}  // namespace mlakit
