// The CPU reference's sparse decode (docs/spec.md section 2) against a float64 oracle written here (out, lse and
// max_logits), plus properties: every negative id is "no key", all-invalid rows give 0 / -inf, topk_length hides
// the columns past it (which point at NaN-poisoned rows), duplicates count, a -inf sink changes nothing and a +inf
// sink zeroes out with LSE unchanged, selecting every row equals dense decode, and ids past the cache are rejected
// before anything is written.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "mlakit/registry.h"
#include "reference/ops.h"

namespace mlakit {
namespace {

using test::SparseCase;
using test::SparseCaseConfig;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct OracleResult {
  std::vector<float> out;
  std::vector<float> lse;
  std::vector<float> max_logits;  ///< tau <q, K_j> at its largest over the row's keys; -inf for a row without keys
};

/// docs/spec.md section 2 in float64 from the case's independently decoded rows.
OracleResult oracle_sparse(const SparseCase& c) {
  const SparseCaseConfig& cfg = c.config;
  const int64_t d_qk = cfg.dims.d_qk(), d_v = cfg.dims.d_v();
  const std::vector<double> q = c.q_values();
  OracleResult r;
  for (int64_t b = 0; b < cfg.batch; ++b) {
    for (int64_t i = 0; i < cfg.s_q; ++i) {
      std::vector<const float*> keys;  // one entry per valid column: duplicates count
      for (int64_t k = 0; k < c.used_columns(b); ++k) {
        const int32_t id = c.indices[static_cast<size_t>((b * cfg.s_q + i) * cfg.topk + k)];
        if (id >= 0) keys.push_back(c.row_values.data() + int64_t(id) * d_qk);
      }
      for (int64_t h = 0; h < cfg.h_q; ++h) {
        const double* qv = q.data() + ((b * cfg.s_q + i) * cfg.h_q + h) * d_qk;
        std::vector<double> s;
        double m = -kInf;
        for (const float* key : keys) {
          double dot = 0;
          for (int64_t k = 0; k < d_qk; ++k) dot += qv[k] * key[k];
          s.push_back(double(cfg.softmax_scale) * dot);
          m = std::max(m, s.back());
        }
        double denom = 0;
        std::vector<double> acc(static_cast<size_t>(d_v), 0.0);
        for (size_t j = 0; j < keys.size(); ++j) {
          const double w = std::exp(s[j] - m);
          denom += w;
          for (int64_t k = 0; k < d_v; ++k) acc[size_t(k)] += w * keys[j][k];
        }
        const double lse = keys.empty() ? -kInf : m + std::log(denom);
        const double sink = c.attn_sink.empty() ? -kInf : double(c.attn_sink[size_t(h)]);
        const double factor = keys.empty() ? 0.0 : 1.0 / (1.0 + std::exp(sink - lse));
        for (int64_t k = 0; k < d_v; ++k) r.out.push_back(keys.empty() ? 0.0f : float(acc[size_t(k)] / denom * factor));
        r.lse.push_back(float(lse));
        r.max_logits.push_back(float(m));
      }
    }
  }
  return r;
}

void expect_matches_oracle(SparseCase& c) {
  const Status st = reference::sparse_decode(c.problem());
  ASSERT_TRUE(st.ok()) << st.to_string();
  const OracleResult ref = oracle_sparse(c);
  EXPECT_TRUE(test::check_out(c.out_floats(), ref.out, c.row_vmax(), c.config.dims.d_v(),
                              test::reference_rounding_tolerance(c.config.q_dtype)));
  if (c.config.with_lse) {
    EXPECT_TRUE(test::check_lse(c.lse, ref.lse));
  }
  // max_logits, an optional output (FlashMLA's sparse prefill returns it), in a second call of its own.
  const SparseCaseConfig& cfg = c.config;
  std::vector<float> max_logits(ref.max_logits.size(), std::numeric_limits<float>::quiet_NaN());
  SparseDecodeProblem p = c.problem();
  p.max_logits = TensorView::contiguous(max_logits.data(), DType::kFP32, {cfg.batch, cfg.s_q, cfg.h_q}, Device::cpu());
  const Status with_max = reference::sparse_decode(p);
  ASSERT_TRUE(with_max.ok()) << with_max.to_string();
  EXPECT_TRUE(test::check_lse(max_logits, ref.max_logits)) << "max_logits";
}

std::string describe(const SparseCaseConfig& cfg) {
  std::string s = std::string("kv=") + kv_format_name(cfg.format) + " q=" + dtype_name(cfg.q_dtype) +
                  " b=" + std::to_string(cfg.batch) + " s_q=" + std::to_string(cfg.s_q) +
                  " h_q=" + std::to_string(cfg.h_q) + " topk=" + std::to_string(cfg.topk) +
                  " P=" + std::to_string(cfg.page_size) + " pages=" + std::to_string(cfg.num_pages) +
                  " topk_length=" + (cfg.topk_length.empty() ? "none" : "given") +
                  " sink=" + (cfg.attn_sink.empty() ? "none" : "given") + " seed=" + std::to_string(cfg.seed);
  return s;
}

// ---------------------------------------------------------------- oracle over formats and options

using SparseParams = std::tuple<KvFormat, DType, int64_t /*s_q*/, bool /*topk_length*/, bool /*sink*/>;
class SparseOracle : public ::testing::TestWithParam<SparseParams> {};

TEST_P(SparseOracle, MatchesFloat64Oracle) {
  const auto [format, q_dtype, s_q, with_length, with_sink] = GetParam();
  SparseCaseConfig cfg;
  cfg.format = format;
  cfg.q_dtype = q_dtype;
  cfg.batch = 3;
  cfg.s_q = s_q;
  cfg.h_q = 4;
  cfg.topk = 40;
  cfg.page_size = 16;
  cfg.num_pages = 5;
  if (with_length) cfg.topk_length = {40, 0, 17};
  if (with_sink) cfg.attn_sink = {-INFINITY, 0.5f, -2.0f, 3.0f};
  cfg.seed = 300 + uint64_t(format) * 50 + uint64_t(q_dtype) * 10 + uint64_t(s_q) + (with_length ? 3 : 0) +
             (with_sink ? 5 : 0);
  SCOPED_TRACE(describe(cfg));
  SparseCase c = SparseCase::generate(cfg);
  expect_matches_oracle(c);
}

INSTANTIATE_TEST_SUITE_P(AllFormats, SparseOracle,
                         ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla),
                                            ::testing::Values(DType::kBF16, DType::kFP16),
                                            ::testing::Values(int64_t{1}, int64_t{3}), ::testing::Bool(),
                                            ::testing::Bool()));

// ---------------------------------------------------------------- invalid ids and empty rows

TEST(SparseInvalid, AllNegativeIdsGiveZeroAndMinusInf) {
  SparseCaseConfig cfg;
  cfg.invalid_fraction = 1.0;  // -1, -2, -7 and INT32_MIN only
  cfg.s_q = 2;
  cfg.attn_sink = std::vector<float>(size_t(cfg.h_q), 1.0f);  // a sink must not revive an empty row
  SCOPED_TRACE(describe(cfg));
  SparseCase c = SparseCase::generate(cfg);
  ASSERT_TRUE(reference::sparse_decode(c.problem()).ok());
  for (size_t k = 0; k < c.out.size(); ++k) ASSERT_EQ(c.out[k], 0u) << "out element " << k;
  for (size_t k = 0; k < c.lse.size(); ++k) ASSERT_EQ(c.lse[k], -INFINITY) << "lse element " << k;
}

TEST(SparseInvalid, ZeroTopkLengthGivesEmptyRows) {
  SparseCaseConfig cfg;
  cfg.batch = 2;
  cfg.topk_length = {0, 0};  // every column then points at a NaN-poisoned row
  SCOPED_TRACE(describe(cfg));
  SparseCase c = SparseCase::generate(cfg);
  ASSERT_TRUE(reference::sparse_decode(c.problem()).ok());
  for (size_t k = 0; k < c.out.size(); ++k) ASSERT_EQ(c.out[k], 0u) << "out element " << k;
  for (size_t k = 0; k < c.lse.size(); ++k) ASSERT_EQ(c.lse[k], -INFINITY) << "lse element " << k;
}

// Every negative value is "no key": replacing each -1 with another negative id changes nothing.
TEST(SparseInvalid, EveryNegativeIdIsNoKey) {
  SparseCaseConfig cfg;
  cfg.invalid_fraction = 0.5;
  cfg.seed = 11;
  SparseCase c = SparseCase::generate(cfg);
  ASSERT_TRUE(reference::sparse_decode(c.problem()).ok());
  for (int32_t other : {-2, -1000, INT32_MIN}) {
    SCOPED_TRACE("negative id " + std::to_string(other));
    SparseCase d = c;
    for (int32_t& id : d.indices) id = id < 0 ? other : id;
    d.poison_outputs();
    ASSERT_TRUE(reference::sparse_decode(d.problem()).ok());
    EXPECT_EQ(c.out, d.out);
    EXPECT_EQ(c.lse, d.lse);
  }
}

TEST(SparseInvalid, IdPastTheCacheIsRejectedBeforeWriting) {
  SparseCaseConfig cfg;
  cfg.s_q = 2;
  SparseCase c = SparseCase::generate(cfg);
  const int64_t rows = cfg.num_pages * cfg.page_size;
  const size_t at = size_t((1 * cfg.s_q + 1) * cfg.topk + 3);  // indices[1][1][3]
  c.indices[at] = int32_t(rows);
  const Status st = reference::sparse_decode(c.problem());
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("indices[1][1][3]=" + std::to_string(rows)), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(std::to_string(rows)), std::string::npos) << st.message();
  for (size_t k = 0; k < c.out.size(); ++k) ASSERT_EQ(c.out[k], test::kPoison16) << "out element " << k << " written";
  for (size_t k = 0; k < c.lse.size(); ++k) ASSERT_TRUE(std::isnan(c.lse[k])) << "lse element " << k << " written";
}

// ---------------------------------------------------------------- duplicates

// Listing every column twice doubles every weight: out is unchanged and lse grows by exactly ln 2.
TEST(SparseDuplicates, RepeatedListAddsLn2) {
  SparseCaseConfig cfg;
  cfg.topk = 24;
  cfg.s_q = 2;
  cfg.seed = 5;
  SparseCase once = SparseCase::generate(cfg);
  ASSERT_TRUE(reference::sparse_decode(once.problem()).ok());

  SparseCaseConfig cfg2 = cfg;
  cfg2.topk = 2 * cfg.topk;
  SparseCase twice = once;
  twice.config = cfg2;
  twice.indices.clear();
  for (int64_t r = 0; r < cfg.batch * cfg.s_q; ++r) {
    const auto first = once.indices.begin() + r * cfg.topk;
    twice.indices.insert(twice.indices.end(), first, first + cfg.topk);
    twice.indices.insert(twice.indices.end(), first, first + cfg.topk);
  }
  twice.poison_outputs();
  ASSERT_TRUE(reference::sparse_decode(twice.problem()).ok());

  EXPECT_TRUE(test::check_out(twice.out_floats(), once.out_floats(), once.row_vmax(), cfg.dims.d_v(),
                              test::reference_rounding_tolerance(cfg.q_dtype)));
  std::vector<float> expected_lse = once.lse;
  for (float& l : expected_lse) l = std::isinf(l) ? l : float(double(l) + std::log(2.0));
  EXPECT_TRUE(test::check_lse(twice.lse, expected_lse));
  expect_matches_oracle(twice);
}

// ---------------------------------------------------------------- attention sink limits

TEST(SparseSink, MinusInfinityHasNoEffectPlusInfinityZeroes) {
  SparseCaseConfig cfg;
  cfg.h_q = 4;
  cfg.s_q = 2;
  cfg.seed = 8;
  SparseCase plain = SparseCase::generate(cfg);
  ASSERT_TRUE(reference::sparse_decode(plain.problem()).ok());

  SparseCase no_effect = plain;
  no_effect.attn_sink.assign(size_t(cfg.h_q), -INFINITY);
  no_effect.poison_outputs();
  ASSERT_TRUE(reference::sparse_decode(no_effect.problem()).ok());
  EXPECT_EQ(plain.out, no_effect.out);
  EXPECT_EQ(plain.lse, no_effect.lse);

  SparseCase zeroed = plain;
  zeroed.attn_sink.assign(size_t(cfg.h_q), INFINITY);
  zeroed.poison_outputs();
  ASSERT_TRUE(reference::sparse_decode(zeroed.problem()).ok());
  for (size_t k = 0; k < zeroed.out.size(); ++k) {
    ASSERT_EQ(zeroed.out[k] & 0x7FFFu, 0u) << "out element " << k << " is not +-0";
  }
  EXPECT_EQ(plain.lse, zeroed.lse);  // LSE is returned unchanged
}

// ---------------------------------------------------------------- sparse over every row == dense

TEST(SparseVersusDense, SelectingEveryRowEqualsDenseDecode) {
  for (KvFormat format : {KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla}) {
    test::DecodeCaseConfig dcfg;
    dcfg.format = format;
    dcfg.seq_lens = {1, 40, 77};
    dcfg.page_size = 16;
    dcfg.h_q = 6;
    dcfg.s_q = 2;
    SCOPED_TRACE(std::string("kv=") + kv_format_name(format));
    test::DecodeCase dense = test::DecodeCase::generate(dcfg);
    ASSERT_TRUE(reference::decode(dense.problem()).ok());

    // Same q, cache and output buffers; indices list rows page * P + offset of every token, in order.
    const int64_t topk = 77;
    std::vector<int32_t> indices(size_t(dense.batch * dcfg.s_q * topk), -1);
    for (int64_t b = 0; b < dense.batch; ++b) {
      for (int64_t i = 0; i < dcfg.s_q; ++i) {
        for (int64_t t = 0; t < dcfg.seq_lens[size_t(b)]; ++t) {
          const int32_t page = dense.block_table[size_t(b * dense.table_row_stride + t / dcfg.page_size)];
          indices[size_t((b * dcfg.s_q + i) * topk + t)] = int32_t(page * dcfg.page_size + t % dcfg.page_size);
        }
      }
    }
    std::vector<uint16_t> out(dense.out.size(), test::kPoison16);
    std::vector<float> lse(dense.lse.size(), NAN);
    const DecodeProblem d = dense.problem();
    SparseDecodeProblem s;
    s.q = d.q;
    s.kv = d.kv;
    s.indices = TensorView::contiguous(indices.data(), DType::kInt32, {dense.batch, dcfg.s_q, topk});
    s.out = TensorView::contiguous(out.data(), dcfg.q_dtype, {dense.batch, dcfg.s_q, dcfg.h_q, dcfg.dims.d_v()});
    s.lse = TensorView::contiguous(lse.data(), DType::kFP32, {dense.batch, dcfg.s_q, dcfg.h_q});
    s.softmax_scale = dcfg.softmax_scale;
    ASSERT_TRUE(reference::sparse_decode(s).ok());
    EXPECT_EQ(out, dense.out);  // same rows in the same order: the same bits
    EXPECT_EQ(lse, dense.lse);
  }
}

// ---------------------------------------------------------------- through the public backend API

TEST(SparseThroughBackend, RegistryReferenceMatchesDirectCall) {
  const Registry registry = make_default_registry();
  const Backend* backend = registry.get("reference");
  ASSERT_NE(backend, nullptr);
  SparseCaseConfig cfg;
  cfg.format = KvFormat::kFP8DsMla;
  cfg.s_q = 2;
  cfg.topk_length = {64, 30};
  cfg.attn_sink = std::vector<float>(size_t(cfg.h_q), 0.25f);
  SparseCase direct = SparseCase::generate(cfg);
  SparseCase via = direct;
  ASSERT_TRUE(reference::sparse_decode(direct.problem()).ok());
  const SparseDecodeProblem p = via.problem();
  std::vector<uint8_t> ws(backend->workspace_bytes(p) + 1);
  const Status st = backend->run(p, Workspace{ws.data(), ws.size()}, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(direct.out, via.out);
  EXPECT_EQ(direct.lse, via.lse);
}

// docs/spec.md section 2: rows are located by id alone, so sparse decode takes any page size (FlashMLA's tests use
// 2, 53, 61, 69 and 576), while dense decode keeps its power-of-two rule.
TEST(SparsePageSize, AnyPageSizeIsAcceptedDenseStillNeedsPowerOfTwo) {
  const Registry registry = make_default_registry();
  const Backend* backend = registry.get("reference");
  ASSERT_NE(backend, nullptr);
  for (int64_t page_size : {2, 53, 69, 576}) {
    SparseCaseConfig cfg;
    cfg.page_size = page_size;
    cfg.num_pages = 130 / page_size + 2;
    cfg.seed = uint64_t(page_size);
    SparseCase c = SparseCase::generate(cfg);
    SparseCase direct = c;
    ASSERT_TRUE(reference::sparse_decode(direct.problem()).ok());
    const SparseDecodeProblem p = c.problem();
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    std::vector<uint8_t> ws(backend->workspace_bytes(p) + 1);
    const Status st = backend->run(p, Workspace{ws.data(), ws.size()}, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(direct.out, c.out);
  }
  test::DecodeCase dense = test::DecodeCase::generate(test::DecodeCaseConfig{});
  DecodeProblem dp = dense.problem();
  dp.kv.pages.shape[1] = 53;
  const Status s = dp.validate();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("page_size=53: must be a power of two"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace mlakit
