// The CPU reference, through the public backend API, reproduces every case of FlashMLA's sparse golden vectors
// for DeepSeek V4 and V3.2 (MLAKIT_TESTDATA_DIR "/flashmla_sparse", see its README.md): the paged fp8_ds_v4
// format with V as the whole row, the extra cache with its own page size and topk_length, attention sinks (+inf
// and -inf heads), all-invalid rows, and fp8_ds_mla caches with odd page sizes and padded page strides. out is
// compared with docs/spec.md section 10's bf16 tolerance, lse with the LSE tolerance after converting FlashMLA's
// conventions (golden.h). Also: append_kv in fp8_ds_v4 reproduces FlashMLA's cache bytes from the bf16 rows.

#include <gtest/gtest.h>

#include <algorithm>
#include <ostream>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/golden.h"
#include "common/npy.h"
#include "mlakit/registry.h"
#include "reference/kv_rows.h"

namespace mlakit {
namespace {

std::string dataset_dir() { return std::string(MLAKIT_TESTDATA_DIR) + "/flashmla_sparse"; }

struct SparseGoldenCase {
  std::string name;
  bool v4 = false;  // layout "model1" (fp8_ds_v4, V4 geometry), else "v32" (fp8_ds_mla)
  int64_t page_size = 0, extra_page_size = 0;
  float softmax_scale = 0.0f;
  bool has_kv_bf16 = false;  // the rows before quantisation are stored (for the writer's test)
};

void PrintTo(const SparseGoldenCase& c, std::ostream* os) { *os << c.name; }

std::vector<SparseGoldenCase> golden_cases() {
  std::vector<SparseGoldenCase> cases;
  for (const std::string& object : test::manifest_cases(dataset_dir() + "/manifest.json")) {
    SparseGoldenCase c;
    c.name = test::string_field(object, "name");
    c.v4 = test::string_field(object, "layout") == "model1";
    c.page_size = int64_t(test::number_field(object, "page_size", 0));
    c.extra_page_size = int64_t(test::number_field(test::object_field(object, "extra"), "page_size", 0));
    c.softmax_scale = float(test::number_field(object, "softmax_scale", 0));
    c.has_kv_bf16 = object.find("\"kv_bf16.npy\"") != std::string::npos;
    cases.push_back(c);
  }
  if (cases.empty()) cases.push_back({"missing"});
  return cases;
}

class FlashMlaSparseGolden : public ::testing::TestWithParam<SparseGoldenCase> {
 protected:
  void SetUp() override {
    if (GetParam().name == "missing") GTEST_SKIP() << "no golden vectors at " << dataset_dir();
    backend_ = registry_.get("reference");
    ASSERT_NE(backend_, nullptr);
  }

  bool has(const std::string& file) const { return std::filesystem::exists(path(file)); }
  std::string path(const std::string& file) const { return dataset_dir() + "/" + GetParam().name + "/" + file + ".npy"; }
  test::NpyArray load(const std::string& file, const std::string& dtype) {
    test::NpyArray a;
    std::string error;
    EXPECT_TRUE(test::load_npy_checked(path(file), dtype, {}, &a, &error)) << error;
    return a;
  }

  /// The cache view FlashMLA's tensor describes: [num_pages, page_bytes] bytes, P tokens per page.
  KvCacheView cache_view(test::NpyArray& pages, int64_t page_size) const {
    const bool v4 = GetParam().v4;
    const KvFormat format = v4 ? KvFormat::kFP8DsV4 : KvFormat::kFP8DsMla;
    const MlaDims dims = v4 ? MlaDims::deepseek_v4() : MlaDims{};
    KvCacheView kv = KvCacheView::contiguous(pages.data.data(), format, pages.shape[0], page_size, dims);
    kv.pages.stride[0] = pages.shape[1];  // the page bytes as stored (FlashMLA pads pages)
    return kv;
  }

  Registry registry_ = make_default_registry();
  const Backend* backend_ = nullptr;
};

TEST_P(FlashMlaSparseGolden, ReferenceReproducesFlashMla) {
  const SparseGoldenCase& gc = GetParam();
  test::NpyArray q = load("q", "<u2"), cache = load("kv_cache", "|u1"), idx = load("indices", "<i4");
  ASSERT_EQ(q.shape.size(), 4u);
  const int64_t b = q.shape[0], s_q = q.shape[1], h_q = q.shape[2], d_qk = q.shape[3];
  ASSERT_EQ(d_qk, gc.v4 ? 512 : 576);
  constexpr int64_t kDimV = 512;

  SparseDecodeProblem p;
  p.q = TensorView::contiguous(q.data.data(), DType::kBF16, {b, s_q, h_q, d_qk});
  p.kv = cache_view(cache, gc.page_size);
  p.indices = TensorView::contiguous(idx.data.data(), DType::kInt32, {b, s_q, idx.shape[2]});
  test::NpyArray topk_length, sink, extra_cache, extra_idx, extra_len;
  if (has("topk_length")) {
    topk_length = load("topk_length", "<i4");
    p.topk_length = TensorView::contiguous(topk_length.data.data(), DType::kInt32, {b});
  }
  if (has("attn_sink")) {
    sink = load("attn_sink", "<f4");
    p.attn_sink = TensorView::contiguous(sink.data.data(), DType::kFP32, {h_q});
  }
  if (has("extra_indices")) {
    extra_cache = load("extra_kv_cache", "|u1");
    extra_idx = load("extra_indices", "<i4");
    p.extra_kv = cache_view(extra_cache, gc.extra_page_size);
    p.extra_indices = TensorView::contiguous(extra_idx.data.data(), DType::kInt32, {b, s_q, extra_idx.shape[2]});
    if (has("extra_topk_length")) {
      extra_len = load("extra_topk_length", "<i4");
      p.extra_topk_length = TensorView::contiguous(extra_len.data.data(), DType::kInt32, {b});
    }
  }
  std::vector<uint16_t> out(size_t(b * s_q * h_q * kDimV), 0xffff);
  std::vector<float> lse(size_t(b * s_q * h_q), NAN);
  p.out = TensorView::contiguous(out.data(), DType::kBF16, {b, s_q, h_q, kDimV});
  p.lse = TensorView::contiguous(lse.data(), DType::kFP32, {b, s_q, h_q});
  p.softmax_scale = gc.softmax_scale;
  ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
  std::vector<uint8_t> ws(backend_->workspace_bytes(p) + 1);
  const Status ran = backend_->run(p, Workspace{ws.data(), ws.size()}, nullptr);
  ASSERT_TRUE(ran.ok()) << ran.to_string();

  // vmax per (b, i): the largest |V| over the valid ids of both sets (the tolerance's scale).
  std::vector<float> row_vmax, row(static_cast<size_t>(d_qk));
  auto vmax_of = [&](const KvCacheView& kv, const test::NpyArray& ids, const test::NpyArray* len, int64_t r, float m) {
    const int64_t topk = ids.shape[2];
    const int64_t used = len ? std::clamp<int64_t>(len->at<int32_t>(r / s_q), 0, topk) : topk;
    for (int64_t k = 0; k < used; ++k) {
      const int32_t id = ids.at<int32_t>(r * topk + k);
      if (id < 0) continue;
      reference::decode_kv_token(kv, id / kv.page_size(), id % kv.page_size(), row.data());
      for (int64_t c = 0; c < kDimV; ++c) m = std::max(m, std::fabs(row[size_t(c)]));
    }
    return m;
  };
  for (int64_t r = 0; r < b * s_q; ++r) {
    float m = vmax_of(p.kv, idx, p.topk_length.defined() ? &topk_length : nullptr, r, 0.0f);
    if (p.has_extra()) m = vmax_of(p.extra_kv, extra_idx, p.extra_topk_length.defined() ? &extra_len : nullptr, r, m);
    row_vmax.insert(row_vmax.end(), size_t(h_q), m);
  }
  const test::NpyArray golden_out = load("out", "<u2"), golden_lse = load("lse", "<f4");
  ASSERT_EQ(golden_out.numel(), int64_t(out.size())) << golden_out.shape_string();
  EXPECT_TRUE(test::check_out(test::to_floats(out, DType::kBF16),
                              test::to_floats(golden_out.to_vector<uint16_t>(), DType::kBF16), row_vmax, kDimV,
                              DType::kBF16));
  EXPECT_TRUE(test::check_lse(lse, test::native_lse(golden_lse)));
}

// FlashMLA's V4 cache bytes are the writer of docs/spec.md section 4 applied to kv_bf16: append_kv must give them
// exactly, page padding included (zero in both). Run on the cases that store kv_bf16.
class FlashMlaSparseGoldenBytes : public FlashMlaSparseGolden {};

std::vector<SparseGoldenCase> cases_with_kv_bf16() {
  std::vector<SparseGoldenCase> all = golden_cases(), kept;
  for (const SparseGoldenCase& c : all) {
    if (c.has_kv_bf16 || c.name == "missing") kept.push_back(c);
  }
  if (kept.empty()) kept.push_back({"missing"});
  return kept;
}

TEST_P(FlashMlaSparseGoldenBytes, AppendKvWritesFlashMlasV4Bytes) {
  const SparseGoldenCase& gc = GetParam();
  test::NpyArray golden = load("kv_cache", "|u1"), rows = load("kv_bf16", "<u2");
  const int64_t tokens = rows.shape[0] * rows.shape[1];
  const std::vector<uint16_t> values = rows.to_vector<uint16_t>();  // [T, 512]: kv_c (448) then k_pe (64)
  std::vector<uint16_t> kv_c, k_pe;
  for (int64_t t = 0; t < tokens; ++t) {
    kv_c.insert(kv_c.end(), values.begin() + t * 512, values.begin() + t * 512 + 448);
    k_pe.insert(k_pe.end(), values.begin() + t * 512 + 448, values.begin() + (t + 1) * 512);
  }
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) slots[size_t(t)] = t;
  test::NpyArray written = golden;
  std::fill(written.data.begin(), written.data.end(), uint8_t(0));
  AppendKvProblem a;
  a.kv_c = TensorView::contiguous(kv_c.data(), DType::kBF16, {tokens, 448});
  a.k_pe = TensorView::contiguous(k_pe.data(), DType::kBF16, {tokens, 64});
  a.slot_mapping = TensorView::contiguous(slots.data(), DType::kInt64, {tokens});
  a.cache = cache_view(written, gc.page_size);
  ASSERT_TRUE(a.validate().ok()) << a.validate().to_string();
  const Status st = backend_->run(a, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  int64_t differing = 0, first = -1;
  for (size_t i = 0; i < golden.data.size(); ++i) {
    if (golden.data[i] != written.data[i] && differing++ == 0) first = int64_t(i);
  }
  EXPECT_EQ(differing, 0) << "bytes differ from FlashMLA's, first at " << first;
}

INSTANTIATE_TEST_SUITE_P(Manifest, FlashMlaSparseGolden, ::testing::ValuesIn(golden_cases()),
                         [](const ::testing::TestParamInfo<SparseGoldenCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Manifest, FlashMlaSparseGoldenBytes, ::testing::ValuesIn(cases_with_kv_bf16()),
                         [](const ::testing::TestParamInfo<SparseGoldenCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mlakit
