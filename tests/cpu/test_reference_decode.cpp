// The CPU reference's dense decode (docs/spec.md section 1) against a float64 oracle written here from the
// SPEC text, plus properties that need no oracle: uniform scores give the mean of V, the causal rule
// equals truncating L_b, split-KV + merge equals the unsplit result, empty rows give 0 / -inf, and
// NaN-poisoned unused rows, pages and block-table entries are never read, for every page size.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "mlakit/registry.h"
#include "reference/ops.h"

namespace mlakit {
namespace {

using test::DecodeCase;
using test::DecodeCaseConfig;

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct OracleResult {
  std::vector<float> out;  // [b, s_q, h_q, d_v]
  std::vector<float> lse;  // [b, s_q, h_q]
};

/// docs/spec.md section 1 in float64, from the case's independently decoded rows and q bits.
OracleResult oracle_decode(const DecodeCase& c) {
  const DecodeCaseConfig& cfg = c.config;
  const int64_t d_qk = cfg.dims.d_qk(), d_v = cfg.dims.d_v();
  const std::vector<double> q = c.q_values();
  OracleResult r;
  for (int64_t b = 0; b < c.batch; ++b) {
    const int64_t len = cfg.seq_lens[size_t(b)];
    const std::vector<float>& rows = c.kv_rows[size_t(b)];
    for (int64_t i = 0; i < cfg.s_q; ++i) {
      // Causal: query i is token L - s_q + i and sees keys j <= L - s_q + i.
      const int64_t n = cfg.causal ? std::max<int64_t>(0, std::min(len, len - cfg.s_q + i + 1)) : len;
      for (int64_t h = 0; h < cfg.h_q; ++h) {
        const double* qv = q.data() + ((b * cfg.s_q + i) * cfg.h_q + h) * d_qk;
        std::vector<double> s(static_cast<size_t>(n));
        double m = kNegInf;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t k = 0; k < d_qk; ++k) dot += qv[k] * rows[size_t(j * d_qk + k)];
          s[size_t(j)] = double(cfg.softmax_scale) * dot;
          m = std::max(m, s[size_t(j)]);
        }
        double denom = 0;
        std::vector<double> acc(size_t(d_v), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          const double w = std::exp(s[size_t(j)] - m);
          denom += w;
          for (int64_t k = 0; k < d_v; ++k) acc[size_t(k)] += w * rows[size_t(j * d_qk + k)];
        }
        for (int64_t k = 0; k < d_v; ++k) r.out.push_back(n > 0 ? float(acc[size_t(k)] / denom) : 0.0f);
        r.lse.push_back(n > 0 ? float(m + std::log(denom)) : float(kNegInf));
      }
    }
  }
  return r;
}

/// Runs the reference directly and checks it against the oracle with the reference's rounding tolerance.
void expect_matches_oracle(DecodeCase& c) {
  const Status st = reference::decode(c.problem());
  ASSERT_TRUE(st.ok()) << st.to_string();
  const OracleResult ref = oracle_decode(c);
  EXPECT_TRUE(test::check_out(c.out_floats(), ref.out, c.row_vmax(), c.config.dims.d_v(),
                              test::reference_rounding_tolerance(c.config.q_dtype)));
  if (c.config.with_lse) {
    EXPECT_TRUE(test::check_lse(c.lse, ref.lse));
  }
}

std::string describe(const DecodeCaseConfig& cfg) {
  std::string s = std::string("kv=") + kv_format_name(cfg.format) + " q=" + dtype_name(cfg.q_dtype) +
                  " d_c=" + std::to_string(cfg.dims.d_c) + " d_r=" + std::to_string(cfg.dims.d_r) +
                  " P=" + std::to_string(cfg.page_size) + " s_q=" + std::to_string(cfg.s_q) +
                  " h_q=" + std::to_string(cfg.h_q) + " causal=" + (cfg.causal ? "1" : "0") +
                  " seed=" + std::to_string(cfg.seed) + " seq_lens=";
  for (int32_t l : cfg.seq_lens) s += std::to_string(l) + ",";
  return s;
}

// ---------------------------------------------------------------- every format against the oracle

using FormatParams = std::tuple<KvFormat, DType, int64_t /*s_q*/, bool /*causal*/>;
class DecodeOracle : public ::testing::TestWithParam<FormatParams> {};

TEST_P(DecodeOracle, MatchesFloat64Oracle) {
  const auto [format, q_dtype, s_q, causal] = GetParam();
  DecodeCaseConfig cfg;
  cfg.format = format;
  cfg.q_dtype = q_dtype;
  cfg.s_q = s_q;
  cfg.causal = causal;
  cfg.h_q = 5;
  cfg.page_size = 16;
  cfg.seq_lens = {0, 1, 3, 15, 16, 17, 70};
  cfg.page_padding_bytes = 48;  // a page stride that is not P * row_bytes
  cfg.seed = 1000 + uint64_t(format) * 100 + uint64_t(q_dtype) * 10 + uint64_t(s_q) + (causal ? 7 : 0);
  SCOPED_TRACE(describe(cfg));
  DecodeCase c = DecodeCase::generate(cfg);
  expect_matches_oracle(c);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, DecodeOracle,
                         ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla),
                                            ::testing::Values(DType::kBF16, DType::kFP16),
                                            ::testing::Values(int64_t{1}, int64_t{2}, int64_t{5}),
                                            ::testing::Bool()));

// ---------------------------------------------------------------- other geometries

using GeometryParams = std::tuple<KvFormat, MlaDims>;
class DecodeGeometry : public ::testing::TestWithParam<GeometryParams> {};

TEST_P(DecodeGeometry, MatchesFloat64Oracle) {
  const auto [format, dims] = GetParam();
  DecodeCaseConfig cfg;
  cfg.format = format;
  cfg.dims = dims;
  cfg.s_q = 2;
  cfg.causal = true;
  cfg.h_q = 3;
  cfg.page_size = 8;
  cfg.seq_lens = {9, 0, 33};
  cfg.seed = 77 + uint64_t(dims.d_c) + uint64_t(dims.d_r);
  SCOPED_TRACE(describe(cfg));
  DecodeCase c = DecodeCase::generate(cfg);
  expect_matches_oracle(c);
}

INSTANTIATE_TEST_SUITE_P(SmallLatents, DecodeGeometry,
                         ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3),
                                            ::testing::Values(MlaDims{256, 32}, MlaDims{64, 0}, MlaDims{16, 16})));

// ---------------------------------------------------------------- page sizes and poisoned memory

using PagingParams = std::tuple<int64_t /*P*/, KvFormat>;
class DecodePaging : public ::testing::TestWithParam<PagingParams> {};

// Unused rows, unused pages, page padding and block-table padding are all NaN/garbage: any read of them
// turns an output NaN (or faults), so exact agreement with the oracle proves they are never read.
TEST_P(DecodePaging, ShuffledTablesAndPoisonedMemory) {
  const auto [page_size, format] = GetParam();
  DecodeCaseConfig cfg;
  cfg.format = format;
  cfg.page_size = page_size;
  cfg.s_q = 2;
  cfg.causal = true;
  cfg.h_q = 3;
  const int32_t P = int32_t(page_size);
  cfg.seq_lens = {0, 1, P - 1, P, P + 1, 2 * P + 3};
  cfg.extra_pages = 4;
  cfg.extra_table_columns = 3;
  cfg.table_row_padding = 2;
  cfg.page_padding_bytes = 64;
  cfg.seed = 500 + uint64_t(page_size) + uint64_t(format);
  SCOPED_TRACE(describe(cfg));
  DecodeCase c = DecodeCase::generate(cfg);
  expect_matches_oracle(c);
}

INSTANTIATE_TEST_SUITE_P(PowersOfTwo, DecodePaging,
                         ::testing::Combine(::testing::Values(int64_t{1}, int64_t{2}, int64_t{4}, int64_t{8},
                                                              int64_t{16}, int64_t{32}, int64_t{64}, int64_t{128},
                                                              int64_t{256}),
                                            ::testing::Values(KvFormat::kBF16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla)));

// ---------------------------------------------------------------- uniform scores

class DecodeUniform : public ::testing::TestWithParam<KvFormat> {};

// q = 0 makes every score 0: out is the plain mean of the visible V rows and lse = ln(n).
TEST_P(DecodeUniform, ZeroQueryGivesMeanOfV) {
  DecodeCaseConfig cfg;
  cfg.format = GetParam();
  cfg.q_range = 0.0f;
  cfg.s_q = 3;
  cfg.causal = true;
  cfg.h_q = 2;
  cfg.page_size = 32;
  cfg.seq_lens = {1, 2, 50, 100};
  cfg.seed = 31;
  SCOPED_TRACE(describe(cfg));
  DecodeCase c = DecodeCase::generate(cfg);
  ASSERT_TRUE(reference::decode(c.problem()).ok());

  const int64_t d_qk = cfg.dims.d_qk(), d_v = cfg.dims.d_v();
  std::vector<float> mean, lse;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < cfg.s_q; ++i) {
      const int64_t n = cfg.seq_lens[size_t(b)] - cfg.s_q + i + 1;
      for (int64_t h = 0; h < cfg.h_q; ++h) {
        for (int64_t k = 0; k < d_v; ++k) {
          double sum = 0;
          for (int64_t j = 0; j < n; ++j) sum += c.kv_rows[size_t(b)][size_t(j * d_qk + k)];
          mean.push_back(n > 0 ? float(sum / double(n)) : 0.0f);
        }
        lse.push_back(n > 0 ? float(std::log(double(n))) : -INFINITY);
      }
    }
  }
  EXPECT_TRUE(test::check_out(c.out_floats(), mean, c.row_vmax(), d_v,
                              test::reference_rounding_tolerance(cfg.q_dtype)));
  EXPECT_TRUE(test::check_lse(c.lse, lse));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, DecodeUniform,
                         ::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla));

// ---------------------------------------------------------------- causal rule

class DecodeCausal : public ::testing::TestWithParam<int64_t> {};

// Row i of a causal call must equal a non-causal call whose L_b is L_b - s_q + i + 1, bit for bit, and
// rows with no visible key (L_b - s_q + i + 1 <= 0) must be exactly 0 with lse = -inf.
TEST_P(DecodeCausal, RowIEqualsTruncatedNonCausal) {
  const int64_t s_q = GetParam();
  DecodeCaseConfig cfg;
  cfg.s_q = s_q;
  cfg.causal = true;
  cfg.h_q = 4;
  cfg.page_size = 8;
  const int32_t sq = int32_t(s_q);
  cfg.seq_lens = {0, 1, sq - 1, sq, sq + 1, 40};
  cfg.seed = 900 + uint64_t(s_q);
  SCOPED_TRACE(describe(cfg));
  DecodeCase causal = DecodeCase::generate(cfg);
  expect_matches_oracle(causal);

  const int64_t row = cfg.h_q * cfg.dims.d_v();  // output elements of one query token
  for (int64_t i = 0; i < s_q; ++i) {
    SCOPED_TRACE("query row i=" + std::to_string(i));
    DecodeCase truncated = causal;
    truncated.config.causal = false;
    for (size_t b = 0; b < truncated.seq_lens.size(); ++b) {
      truncated.seq_lens[b] = std::max<int32_t>(0, cfg.seq_lens[b] - sq + int32_t(i) + 1);
    }
    truncated.poison_outputs();
    ASSERT_TRUE(reference::decode(truncated.problem()).ok());
    for (int64_t b = 0; b < causal.batch; ++b) {
      const int64_t at = (b * s_q + i) * row;
      EXPECT_EQ(0, std::memcmp(causal.out.data() + at, truncated.out.data() + at, size_t(row) * 2))
          << "request " << b;
      for (int64_t h = 0; h < cfg.h_q; ++h) {
        const size_t l = size_t((b * s_q + i) * cfg.h_q + h);
        EXPECT_EQ(causal.lse[l], truncated.lse[l]) << "request " << b << " head " << h;
        if (truncated.seq_lens[size_t(b)] == 0) {
          EXPECT_EQ(causal.lse[l], -INFINITY);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(QueryTokens, DecodeCausal, ::testing::Range(int64_t{1}, int64_t{9}));

// ---------------------------------------------------------------- empty requests

TEST(DecodeEmpty, AllRequestsEmptyGiveZeroAndMinusInf) {
  for (KvFormat format : {KvFormat::kBF16, KvFormat::kFP8DsMla}) {
    DecodeCaseConfig cfg;
    cfg.format = format;
    cfg.seq_lens = {0, 0, 0};
    cfg.s_q = 2;
    cfg.h_q = 3;
    SCOPED_TRACE(describe(cfg));
    DecodeCase c = DecodeCase::generate(cfg);
    ASSERT_TRUE(reference::decode(c.problem()).ok());
    for (size_t k = 0; k < c.out.size(); ++k) ASSERT_EQ(c.out[k], 0u) << "out element " << k;
    for (size_t k = 0; k < c.lse.size(); ++k) ASSERT_EQ(c.lse[k], -INFINITY) << "lse element " << k;
  }
}

// ---------------------------------------------------------------- split-KV + merge

class DecodeSplitMerge : public ::testing::TestWithParam<std::tuple<KvFormat, int64_t /*chunks*/>> {};

// Each request's keys are cut at random page boundaries into `chunks` parts (some empty); every part runs
// as its own request over the same cache and the parts are merged with docs/spec.md section 6. The result must
// equal the unsplit call within the SPEC bf16 tolerance (the parts are rounded to bf16 before merging).
TEST_P(DecodeSplitMerge, MergedChunksEqualUnsplit) {
  const auto [format, chunks] = GetParam();
  DecodeCaseConfig cfg;
  cfg.format = format;
  cfg.s_q = 2;  // non-causal: every query row sees every chunk
  cfg.h_q = 4;
  cfg.page_size = 16;
  cfg.seq_lens = {0, 5, 16, 100, 250};
  cfg.seed = 4242 + uint64_t(chunks);
  SCOPED_TRACE(describe(cfg) + " chunks=" + std::to_string(chunks));
  DecodeCase whole = DecodeCase::generate(cfg);
  ASSERT_TRUE(reference::decode(whole.problem()).ok());

  const int64_t P = cfg.page_size, rows = whole.batch * cfg.s_q * cfg.h_q, d_v = cfg.dims.d_v();
  std::mt19937_64 rng(cfg.seed);
  // cuts[b] = chunk boundaries in pages: 0 = c_0 <= c_1 <= ... <= c_chunks = ceil(L_b / P).
  std::vector<std::vector<int64_t>> cuts(static_cast<size_t>(whole.batch));
  for (int64_t b = 0; b < whole.batch; ++b) {
    const int64_t pages = (cfg.seq_lens[size_t(b)] + P - 1) / P;
    std::uniform_int_distribution<int64_t> pick(0, pages);
    auto& cb = cuts[size_t(b)];
    cb.push_back(0);
    for (int64_t k = 1; k < chunks; ++k) cb.push_back(pick(rng));
    cb.push_back(pages);
    std::sort(cb.begin(), cb.end());
  }

  std::vector<uint16_t> parts_out(static_cast<size_t>(chunks * rows * d_v));
  std::vector<float> parts_lse(static_cast<size_t>(chunks * rows));
  for (int64_t k = 0; k < chunks; ++k) {
    DecodeCase part = whole;  // same cache and q; a block table and lengths for chunk k
    for (int64_t b = 0; b < whole.batch; ++b) {
      const int64_t first = cuts[size_t(b)][size_t(k)], last = cuts[size_t(b)][size_t(k + 1)];
      const int64_t begin = first * P, end = std::min<int64_t>(last * P, cfg.seq_lens[size_t(b)]);
      part.seq_lens[size_t(b)] = int32_t(std::max<int64_t>(0, end - begin));
      for (int64_t col = 0; col < whole.table_columns; ++col) {
        const int64_t src = first + col;
        part.block_table[size_t(b * whole.table_row_stride + col)] =
            src < whole.table_columns ? whole.block_table[size_t(b * whole.table_row_stride + src)] : -1;
      }
    }
    part.poison_outputs();
    ASSERT_TRUE(reference::decode(part.problem()).ok());
    std::copy(part.out.begin(), part.out.end(), parts_out.begin() + k * rows * d_v);
    std::copy(part.lse.begin(), part.lse.end(), parts_lse.begin() + k * rows);
  }

  std::vector<float> merged(size_t(rows * d_v), NAN), merged_lse(size_t(rows), NAN);
  MergeProblem m;
  m.parts_out = TensorView::contiguous(parts_out.data(), cfg.q_dtype, {chunks, rows, d_v});
  m.parts_lse = TensorView::contiguous(parts_lse.data(), DType::kFP32, {chunks, rows});
  m.out = TensorView::contiguous(merged.data(), DType::kFP32, {rows, d_v});
  m.lse = TensorView::contiguous(merged_lse.data(), DType::kFP32, {rows});
  ASSERT_TRUE(reference::merge(m).ok());

  EXPECT_TRUE(test::check_out(merged, whole.out_floats(), whole.row_vmax(), d_v, cfg.q_dtype));
  EXPECT_TRUE(test::check_lse(merged_lse, whole.lse));
}

INSTANTIATE_TEST_SUITE_P(Chunks, DecodeSplitMerge,
                         ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP8DsMla),
                                            ::testing::Values(int64_t{1}, int64_t{2}, int64_t{3}, int64_t{5})));

// ---------------------------------------------------------------- fp8_e4m3 scale sources

// The scale may come from a pointer (CUDA-graph friendly) or a value; both must give the same bits.
TEST(DecodeKvScale, PointerAndValueAgree) {
  DecodeCaseConfig cfg;
  cfg.format = KvFormat::kFP8E4M3;
  cfg.kv_scale = 0.0371f;
  cfg.seq_lens = {7, 90};
  cfg.s_q = 1;
  DecodeCase by_value = DecodeCase::generate(cfg);
  DecodeCase by_pointer = by_value;
  ASSERT_TRUE(reference::decode(by_value.problem()).ok());
  const float scale = cfg.kv_scale;
  test::DecodeBuffers at = by_pointer.host_buffers();
  at.kv_scale = &scale;
  DecodeProblem p = by_pointer.problem(at, Device::cpu());
  p.kv.kv_scale_value = 123.0f;  // must be ignored when the pointer is given
  ASSERT_TRUE(reference::decode(p).ok());
  EXPECT_EQ(by_value.out, by_pointer.out);
  EXPECT_EQ(by_value.lse, by_pointer.lse);
  expect_matches_oracle(by_value);
}

// ---------------------------------------------------------------- lse is optional

TEST(DecodeOptionalLse, OutWithoutLseMatchesOracle) {
  DecodeCaseConfig cfg;
  cfg.with_lse = false;
  cfg.seq_lens = {3, 64};
  cfg.s_q = 2;
  cfg.causal = true;
  DecodeCase c = DecodeCase::generate(cfg);
  expect_matches_oracle(c);
}

// ---------------------------------------------------------------- through the public backend API

// The same cases through make_default_registry(): validate(), supports(), plan() and run() must accept
// them and give the same bits as the direct call.
TEST(DecodeThroughBackend, RegistryReferenceMatchesDirectCall) {
  const Registry registry = make_default_registry();
  const Backend* backend = registry.get("reference");
  ASSERT_NE(backend, nullptr);
  for (KvFormat format : {KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla}) {
    DecodeCaseConfig cfg;
    cfg.format = format;
    cfg.seq_lens = {0, 1, 64, 65, 300};
    cfg.s_q = 3;
    cfg.causal = true;
    cfg.h_q = 8;
    SCOPED_TRACE(describe(cfg));
    DecodeCase direct = DecodeCase::generate(cfg);
    DecodeCase via = direct;
    ASSERT_TRUE(reference::decode(direct.problem()).ok());
    const DecodeProblem p = via.problem();
    std::vector<uint8_t> ws(backend->workspace_bytes(p) + 1);
    const Workspace workspace{ws.data(), ws.size()};
    const Status planned = backend->plan(p, workspace, nullptr);
    ASSERT_TRUE(planned.ok()) << planned.to_string();
    const Status ran = backend->run(p, workspace, nullptr);
    ASSERT_TRUE(ran.ok()) << ran.to_string();
    EXPECT_EQ(direct.out, via.out);
    EXPECT_EQ(direct.lse, via.lse);
  }
}

}  // namespace
}  // namespace mlakit
