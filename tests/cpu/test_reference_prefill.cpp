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
#include "common/prefill_case.h"
#include "mlakit/numeric.h"
#include "mlakit/registry.h"
#include "reference/ops.h"

namespace mlakit {
namespace {

using test::Geometry;
using test::PrefillCase;
using test::PrefillCaseConfig;
using test::describe;

constexpr double kInf = std::numeric_limits<double>::infinity();

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
