// The CPU reference, through the public backend API, reproduces every case of the FlashMLA golden
// vectors (MLAKIT_TESTDATA_DIR "/flashmla", see its README.md): dense decode with bf16 caches (causal,
// MTP, empty requests) and sparse decode over fp8_ds_mla caches. out is compared with docs/spec.md section 10's
// bf16 tolerance, lse with the LSE tolerance after converting FlashMLA's two conventions: its lse is
// [b, h_q, s_q] (ours [b, s_q, h_q]) and +inf for rows with no key (ours -inf).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "common/golden.h"
#include "common/npy.h"
#include "mlakit/registry.h"

namespace mlakit {
namespace {

constexpr int kDimC = 512, kDimR = 64;    // FlashMLA's MQA 576/512 geometry
constexpr int64_t kMissing = -1;

std::string golden_dir() { return std::string(MLAKIT_TESTDATA_DIR) + "/flashmla"; }

/// What the tests need of one manifest entry.
struct GoldenCase {
  std::string name;
  std::string op;        // "dense_decode" or "sparse_decode"
  bool causal = false;
  int64_t page_size = kMissing;
  float softmax_scale = 0.0f;
};

/// The cases of manifest.json. softmax_scale is DeepSeek-V3's 0.13523378 in every case (README.md), but it is
/// read from the manifest so a future case with another scale is honoured.
std::vector<GoldenCase> read_manifest(const std::string& path) {
  std::vector<GoldenCase> cases;
  for (const std::string& object : test::manifest_cases(path)) {
    GoldenCase c;
    c.name = test::string_field(object, "name");
    c.op = test::string_field(object, "op");
    c.causal = test::field_text(object, "causal").rfind("true", 0) == 0;
    c.page_size = int64_t(test::number_field(object, "page_size", double(kMissing)));
    c.softmax_scale = float(test::number_field(object, "softmax_scale", 0.0));
    cases.push_back(c);
  }
  return cases;
}

std::vector<GoldenCase> golden_cases() {
  const std::string manifest = golden_dir() + "/manifest.json";
  if (!std::filesystem::exists(manifest)) {
    GoldenCase missing;
    missing.name = "missing";
    return {missing};
  }
  return read_manifest(manifest);
}

class FlashMlaGolden : public ::testing::TestWithParam<GoldenCase> {
 protected:
  void SetUp() override {
    if (GetParam().name == "missing") GTEST_SKIP() << "no golden vectors: " << golden_dir() << "/manifest.json is missing";
    backend_ = registry_.get("reference");
    ASSERT_NE(backend_, nullptr);
  }

  test::NpyArray load(const std::string& file, const std::string& dtype) {
    test::NpyArray a;
    std::string error;
    const std::string path = golden_dir() + "/" + GetParam().name + "/" + file + ".npy";
    EXPECT_TRUE(test::load_npy_checked(path, dtype, {}, &a, &error)) << error;
    return a;
  }

  /// out and lse against the golden files, with per-row vmax [b, s_q, h_q].
  void compare(const std::vector<uint16_t>& out, const std::vector<float>& lse, const std::vector<float>& row_vmax) {
    const test::NpyArray golden_out = load("out", "<u2"), golden_lse = load("lse", "<f4");
    ASSERT_EQ(golden_out.numel(), int64_t(out.size())) << golden_out.shape_string();
    ASSERT_EQ(golden_lse.numel(), int64_t(lse.size())) << golden_lse.shape_string();
    EXPECT_TRUE(test::check_out(test::to_floats(out, DType::kBF16),
                                test::to_floats(golden_out.to_vector<uint16_t>(), DType::kBF16), row_vmax, kDimC,
                                DType::kBF16));
    EXPECT_TRUE(test::check_lse(lse, test::native_lse(golden_lse)));
  }

  Registry registry_ = make_default_registry();
  const Backend* backend_ = nullptr;
};

TEST_P(FlashMlaGolden, ReferenceReproducesFlashMla) {
  const GoldenCase& gc = GetParam();
  SCOPED_TRACE("case " + gc.name + " op=" + gc.op + " causal=" + (gc.causal ? "1" : "0"));
  ASSERT_GT(gc.softmax_scale, 0.0f) << "manifest gives no softmax_scale";
  const MlaDims dims{kDimC, kDimR};
  const test::NpyArray q = load("q", "<u2");
  ASSERT_EQ(q.shape.size(), 4u);
  const int64_t b = q.shape[0], s_q = q.shape[1], h_q = q.shape[2];
  ASSERT_EQ(q.shape[3], dims.d_qk());
  std::vector<uint16_t> q_bits = q.to_vector<uint16_t>();
  std::vector<uint16_t> out(size_t(b * s_q * h_q * kDimC), test::kPoison16);
  std::vector<float> lse(size_t(b * s_q * h_q), NAN);
  const TensorView q_view = TensorView::contiguous(q_bits.data(), DType::kBF16, {b, s_q, h_q, dims.d_qk()});
  const TensorView out_view = TensorView::contiguous(out.data(), DType::kBF16, {b, s_q, h_q, kDimC});
  const TensorView lse_view = TensorView::contiguous(lse.data(), DType::kFP32, {b, s_q, h_q});
  std::vector<float> row_vmax;
  std::vector<float> row(size_t(dims.d_qk()));
  const auto max_abs_v = [&](float m) {
    for (int c = 0; c < kDimC; ++c) m = std::max(m, std::fabs(row[size_t(c)]));
    return m;
  };

  if (gc.op == "dense_decode") {
    test::NpyArray cache = load("kv_cache", "<u2");
    const test::NpyArray table = load("block_table", "<i4"), lens = load("seq_lens", "<i4");
    ASSERT_EQ(cache.shape.size(), 4u);
    ASSERT_EQ(cache.shape[1], gc.page_size);
    std::vector<int32_t> block_table = table.to_vector<int32_t>(), seq_lens = lens.to_vector<int32_t>();
    DecodeProblem p;
    p.q = q_view;
    p.kv = KvCacheView::contiguous(cache.data.data(), KvFormat::kBF16, cache.shape[0], cache.shape[1], dims);
    p.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {b, table.shape[1]});
    p.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {b});
    p.out = out_view;
    p.lse = lse_view;
    p.softmax_scale = gc.softmax_scale;
    p.causal = gc.causal;
    std::vector<uint8_t> ws(backend_->workspace_bytes(p) + 1);
    const Workspace workspace{ws.data(), ws.size()};
    const Status planned = backend_->plan(p, workspace, nullptr);
    ASSERT_TRUE(planned.ok()) << planned.to_string();
    const Status ran = backend_->run(p, workspace, nullptr);
    ASSERT_TRUE(ran.ok()) << ran.to_string();

    const int64_t row_bytes = 2 * dims.d_qk();
    for (int64_t bi = 0; bi < b; ++bi) {  // vmax per request over its L_b rows
      float m = 0.0f;
      for (int64_t t = 0; t < seq_lens[size_t(bi)]; ++t) {
        const int64_t page = block_table[size_t(bi * table.shape[1] + t / gc.page_size)];
        const uint8_t* bytes = cache.data.data() + (page * gc.page_size + t % gc.page_size) * row_bytes;
        test::oracle_decode_row(KvFormat::kBF16, dims, 1.0f, bytes, row.data());
        m = max_abs_v(m);
      }
      row_vmax.insert(row_vmax.end(), size_t(s_q * h_q), m);
    }
  } else {
    ASSERT_EQ(gc.op, "sparse_decode");
    test::NpyArray cache = load("kv_cache", "|u1");
    const test::NpyArray idx = load("indices", "<i4");
    ASSERT_EQ(cache.shape.size(), 4u);
    ASSERT_EQ(cache.shape[3], ds_mla::kRowBytes);
    std::vector<int32_t> indices = idx.to_vector<int32_t>();
    const int64_t topk = idx.shape[2];
    SparseDecodeProblem p;
    p.q = q_view;
    p.kv = KvCacheView::contiguous(cache.data.data(), KvFormat::kFP8DsMla, cache.shape[0], cache.shape[1], dims);
    p.indices = TensorView::contiguous(indices.data(), DType::kInt32, {b, s_q, topk});
    p.out = out_view;
    p.lse = lse_view;
    p.softmax_scale = gc.softmax_scale;
    std::vector<uint8_t> ws(backend_->workspace_bytes(p) + 1);
    const Status ran = backend_->run(p, Workspace{ws.data(), ws.size()}, nullptr);
    ASSERT_TRUE(ran.ok()) << ran.to_string();

    for (int64_t r = 0; r < b * s_q; ++r) {  // vmax per (b, i) over its valid ids
      float m = 0.0f;
      for (int64_t k = 0; k < topk; ++k) {
        const int32_t id = indices[size_t(r * topk + k)];
        if (id < 0) continue;
        test::oracle_decode_row(KvFormat::kFP8DsMla, dims, 1.0f, cache.data.data() + int64_t(id) * ds_mla::kRowBytes,
                                row.data());
        m = max_abs_v(m);
      }
      row_vmax.insert(row_vmax.end(), size_t(h_q), m);
    }
  }
  compare(out, lse, row_vmax);
}

INSTANTIATE_TEST_SUITE_P(Manifest, FlashMlaGolden, ::testing::ValuesIn(golden_cases()),
                         [](const ::testing::TestParamInfo<GoldenCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mlakit
