// DeepSeek V4 on the CPU reference (issue 13): the paged fp8_ds_v4 format (docs/spec.md section 4) byte by byte,
// the validation of the V4 geometry and of the extra cache, and the extra cache's one-softmax semantics
// (docs/spec.md section 2), each against an independent statement of the rule.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "mlakit/numeric.h"
#include "mlakit/registry.h"
#include "reference/kv_rows.h"

namespace mlakit {
namespace {

constexpr int64_t kPage = 3;  // tokens per page: odd, so a page's scale blocks start off any power of two

/// A zeroed cache with DeepSeek V4's geometry: fp8_ds_v4 pages padded as FlashMLA pads them, or packed rows of
/// another format. block() and scales() address an fp8_ds_v4 token's two parts.
struct TestCache {
  std::vector<uint8_t> pages;
  KvCacheView view;
  TestCache(KvFormat f, int64_t num_pages, int64_t page_size, float kv_scale = 1.0f) {
    const MlaDims dims = MlaDims::deepseek_v4();
    const int64_t page_bytes = f == KvFormat::kFP8DsV4 ? ds_v4::packed_page_bytes(page_size)
                                                       : page_size * kv_row_bytes(f, dims.d_c, dims.d_r);
    pages.assign(size_t(num_pages * page_bytes), 0);
    view = KvCacheView::contiguous(pages.data(), f, num_pages, page_size, dims);
    view.kv_scale_value = kv_scale;
  }
  TestCache(const TestCache&) = delete;  // view points into pages
  TestCache& operator=(const TestCache&) = delete;
  void put(int64_t id, const float* row) { reference::encode_kv_token(view, row, id / view.page_size(), id % view.page_size()); }
  uint8_t* block(int64_t page, int64_t row) { return pages.data() + page * view.pages.stride[0] + row * 576; }
  uint8_t* scales(int64_t page, int64_t row) {
    return pages.data() + page * view.pages.stride[0] + view.page_size() * 576 + row * 8;
  }
};

/// An fp8_ds_v4 cache of `num_pages` pages of kPage tokens.
TestCache ds_v4_cache(int64_t num_pages) { return TestCache(KvFormat::kFP8DsV4, num_pages, kPage); }

TEST(DsV4Format, PackedPageStrideIsFlashMlas) {
  EXPECT_EQ(ds_v4::packed_page_bytes(64), 37440);   // the golden caches' page bytes
  EXPECT_EQ(ds_v4::packed_page_bytes(2), 1728);
  EXPECT_EQ(ds_v4::packed_page_bytes(256), 149760);
  EXPECT_EQ(ds_v4_cache(2).view.pages.stride[0], ds_v4::packed_page_bytes(kPage));
  EXPECT_EQ(ds_v4_cache(2).view.pages.stride[1], 584);
}

// Token (1, 2) holds every e4m3 code (NaN codes replaced by 448, which also fixes each group's amax) under one
// scale exponent per group; the reader must give code x 2^(e - 127) and the bf16 k_pe, and the writer must give
// the same bytes back at the same places, touching nothing else. Exponents 114 (2^-13, the first power of two
// above the writer's 1e-4 floor) to 246 (groups with 448 x 2^119, the largest finite multiple of 448); 247 is
// WriterRuleAtTheTopOfTheFloatRange's.
TEST(DsV4Format, ReaderAndWriterOverEveryCodeAndScaleExponent) {
  std::mt19937 rng(7);
  for (int e = 114; e <= 245; ++e) {
    SCOPED_TRACE("exponent " + std::to_string(e));
    TestCache golden = ds_v4_cache(2), written = ds_v4_cache(2);
    uint8_t* block = golden.block(1, 2);
    uint8_t* scales = golden.scales(1, 2);
    for (int i = 0; i < ds_v4::kDimC; ++i) {
      uint8_t code = uint8_t((i * 37 + e) % 256);
      if ((code & 0x7f) == 0x7f || i % ds_v4::kGroupSize == 0) code = 0x7e;  // no NaN; 448 in every group
      block[i] = code;
    }
    for (int g = 0; g < ds_v4::kNumGroups; ++g) scales[g] = uint8_t(e + g % 2);  // e and e + 1, both <= 246
    std::vector<uint16_t> k_pe(ds_v4::kDimR);
    for (auto& v : k_pe) v = float_to_bf16(std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng));
    std::memcpy(block + ds_v4::kRopeOffset, k_pe.data(), 2 * k_pe.size());

    std::vector<float> values(512);
    reference::decode_kv_token(golden.view, 1, 2, values.data());
    for (int i = 0; i < ds_v4::kDimC; ++i) {
      const float want = e4m3_to_float(block[i]) * std::ldexp(1.0f, scales[i / ds_v4::kGroupSize] - 127);
      ASSERT_EQ(float_bits(values[size_t(i)]), float_bits(want)) << "column " << i;
    }
    for (int i = 0; i < ds_v4::kDimR; ++i) ASSERT_EQ(values[size_t(448 + i)], bf16_to_float(k_pe[size_t(i)]));

    reference::encode_kv_token(written.view, values.data(), 1, 2);
    EXPECT_EQ(written.pages, golden.pages);  // every byte, the unused scale byte (0) and the other tokens included
  }
}

// The reader alone over every exponent byte, the ones no writer produces included (0: 2^-127; 255: 2^128 = inf in
// float32, so a nonzero code reads as +-inf and a zero code as NaN, as the formula of docs/spec.md section 4 says).
TEST(DsV4Format, ReaderOverEveryExponentByte) {
  TestCache c = ds_v4_cache(1);
  for (int i = 0; i < ds_v4::kDimC; ++i) c.block(0, 0)[i] = uint8_t(i % 256);
  std::vector<float> values(512);
  for (int e = 0; e < 256; ++e) {
    for (int g = 0; g < ds_v4::kNumGroups; ++g) c.scales(0, 0)[g] = uint8_t(e);
    reference::decode_kv_token(c.view, 0, 0, values.data());
    for (int i = 0; i < ds_v4::kDimC; ++i) {
      const float want = e4m3_to_float(uint8_t(i % 256)) * std::ldexp(1.0f, e - 127);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(values[size_t(i)])) << "exponent " << e << " column " << i;
      } else {
        ASSERT_EQ(float_bits(values[size_t(i)]), float_bits(want)) << "exponent " << e << " column " << i;
      }
    }
  }
}

// An amax above 448 x 2^119 (up to FLT_MAX) needs 2^120: exponent byte 247, the largest the writer produces.
TEST(DsV4Format, WriterRuleAtTheTopOfTheFloatRange) {
  TestCache c = ds_v4_cache(1);
  std::vector<float> x(512, 1.0f);
  x[3] = std::numeric_limits<float>::max();   // group 0
  x[64] = -448.0f * std::ldexp(1.0f, 119);    // group 1: exactly 448 x 2^119 -> 2^119
  reference::encode_kv_token(c.view, x.data(), 0, 0);
  EXPECT_EQ(c.scales(0, 0)[0], 247);
  EXPECT_EQ(c.scales(0, 0)[1], 246);
  EXPECT_EQ(c.block(0, 0)[64], 0xfe);  // -448: the e4m3 code of the group's amax
}

TEST(DsV4Format, WriterRuleOnRandomRows) {  // docs/spec.md 4: smallest power of two >= max(amax / 448, 1e-4)
  std::mt19937 rng(11);
  TestCache c = ds_v4_cache(1);
  for (float range : {1e-6f, 0.03f, 1.0f, 300.0f}) {
    std::vector<float> x(512);
    for (auto& v : x) v = std::uniform_real_distribution<float>(-range, range)(rng);
    reference::encode_kv_token(c.view, x.data(), 0, 1);
    for (int g = 0; g < ds_v4::kNumGroups; ++g) {
      float amax = 0.0f;
      for (int i = g * 64; i < (g + 1) * 64; ++i) amax = std::fmax(amax, std::fabs(x[size_t(i)]));
      const double target = std::max(double(amax) / 448.0, 1e-4);
      const int k = int(c.scales(0, 1)[g]) - 127;
      EXPECT_GE(std::ldexp(1.0, k), target) << "group " << g;
      EXPECT_LT(std::ldexp(1.0, k - 1), target) << "group " << g;
      for (int i = g * 64; i < (g + 1) * 64; ++i) {
        ASSERT_EQ(c.block(0, 1)[i], float_to_e4m3(x[size_t(i)] / float(std::ldexp(1.0, k)))) << i;
      }
    }
    EXPECT_EQ(c.scales(0, 1)[7], 0);
  }
}

// ---- validation ----
struct V4Call {
  std::vector<uint16_t> q, out;
  std::vector<float> lse;
  std::vector<int32_t> idx;
  TestCache cache = ds_v4_cache(2);
  SparseDecodeProblem p;
  V4Call() : q(2 * 4 * 512), out(2 * 4 * 512), lse(2 * 4), idx(2 * 5, 0) {
    p.q = TensorView::contiguous(q.data(), DType::kBF16, {2, 1, 4, 512});
    p.kv = cache.view;
    p.indices = TensorView::contiguous(idx.data(), DType::kInt32, {2, 1, 5});
    p.out = TensorView::contiguous(out.data(), DType::kBF16, {2, 1, 4, 512});
    p.lse = TensorView::contiguous(lse.data(), DType::kFP32, {2, 1, 4});
    p.softmax_scale = 0.044f;
  }
};

void expect_rejects(const Status& s, const std::string& fragment) {
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find(fragment), std::string::npos) << s.message();
}

TEST(DsV4Validation, NamesFieldValueAndRule) {
  {
    V4Call c;
    EXPECT_TRUE(c.p.validate().ok()) << c.p.validate().to_string();
  }
  {
    V4Call c;
    c.p.kv.dims = MlaDims{};  // V3 geometry with the V4 format
    expect_rejects(c.p.validate(), "kv.format=fp8_ds_v4: needs d_c=448 and d_r=64, got d_c=512, d_r=64");
  }
  {
    V4Call c;
    c.p.kv.pages.stride[1] = 576;
    expect_rejects(c.p.validate(), "kv.pages.stride[1]=576: must be 584 for fp8_ds_v4");
  }
  {
    V4Call c;
    c.p.kv.dims.v_whole_row = false;  // then out must be [.., 448]
    expect_rejects(c.p.validate(), "d_v = d_c");
  }
  {
    V4Call c;
    c.p.extra_kv = c.cache.view;
    expect_rejects(c.p.validate(), "extra_kv.pages=given: needs extra_indices");
  }
  {
    V4Call c;
    std::vector<int32_t> extra(2 * 3, 0);
    std::vector<uint8_t> bf16_pages(size_t(2 * kPage * 1024));
    c.p.extra_kv = KvCacheView::contiguous(bf16_pages.data(), KvFormat::kBF16, 2, kPage, MlaDims::deepseek_v4());
    c.p.extra_indices = TensorView::contiguous(extra.data(), DType::kInt32, {2, 1, 3});
    expect_rejects(c.p.validate(), "extra_kv.format=bf16: must equal kv.format=fp8_ds_v4");
  }
  {
    V4Call c;
    std::vector<int32_t> extra(2 * 3, 0);
    extra[4] = 2 * kPage;  // one past the extra cache's last row
    c.p.extra_kv = c.cache.view;
    c.p.extra_indices = TensorView::contiguous(extra.data(), DType::kInt32, {2, 1, 3});
    expect_rejects(c.p.validate(), "extra_indices[1][0][1]=6: must be < num_pages * page_size=6");
  }
  {  // dense decode keeps V = the first d_c columns
    std::vector<uint16_t> q(512), out(512);
    std::vector<int32_t> table(1, 0), lens(1, 1);
    std::vector<uint8_t> pages(size_t(4 * 1024));
    DecodeProblem d;
    d.q = TensorView::contiguous(q.data(), DType::kBF16, {1, 1, 1, 512});
    d.kv = KvCacheView::contiguous(pages.data(), KvFormat::kBF16, 1, 4, MlaDims::deepseek_v4());
    d.block_table = TensorView::contiguous(table.data(), DType::kInt32, {1, 1});
    d.seq_lens = TensorView::contiguous(lens.data(), DType::kInt32, {1});
    d.out = TensorView::contiguous(out.data(), DType::kBF16, {1, 1, 1, 512});
    d.softmax_scale = 0.044f;
    expect_rejects(d.validate(), "kv.dims.v_whole_row=true: dense decode takes V = the first d_c columns");
  }
}

// ---- the extra cache: one softmax over both id sets ----
// Three caches hold the same random rows: main (pages of 3 tokens, rows 0-17), extra (pages of 5, rows 18-37 of the
// combined numbering) and combined (pages of 1, rows 0-37), so an id split between main and extra names the same
// row as its combined id. A reference that resolved extra ids in the main cache, with the main page size, or with
// the main cache's fp8_e4m3 scale fails these tests.

class ExtraCache : public ::testing::TestWithParam<KvFormat> {
 protected:
  static constexpr int64_t kB = 2, kH = 3, kMainRows = 18, kExtraRows = 20;
  static constexpr float kScale = 1.0f / 32.0f;
  void SetUp() override {
    const KvFormat f = GetParam();
    main_ = std::make_unique<TestCache>(f, kMainRows / 3, 3, kScale);
    extra_ = std::make_unique<TestCache>(f, kExtraRows / 5, 5, kScale);
    combined_ = std::make_unique<TestCache>(f, kMainRows + kExtraRows, 1, kScale);
    extra_scaled_ = std::make_unique<TestCache>(f, kExtraRows / 5, 5, 2 * kScale);  // fp8_e4m3: another scale
    std::mt19937 rng(3);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> row(512);
    for (int64_t t = 0; t < kMainRows + kExtraRows; ++t) {
      for (auto& v : row) v = u(rng);
      combined_->put(t, row.data());
      if (t < kMainRows) {
        main_->put(t, row.data());
      } else {
        extra_->put(t - kMainRows, row.data());
        extra_scaled_->put(t - kMainRows, row.data());
      }
    }
    q_.resize(size_t(kB * kH * 512));
    for (auto& v : q_) v = float_to_bf16(u(rng));
  }

  /// The reference over `kv` with ids `main` and, when `extra` is non-empty, `extra_kv` with ids `extra`.
  void run(const KvCacheView& kv, const std::vector<int32_t>& main, const KvCacheView* extra_kv,
           const std::vector<int32_t>& extra, std::vector<int32_t> main_len, std::vector<int32_t> extra_len,
           std::vector<uint16_t>* out, std::vector<float>* lse) {
    const int64_t topk = int64_t(main.size()) / kB, extra_topk = int64_t(extra.size()) / kB;
    out->assign(size_t(kB * kH * 512), 0xffff);
    lse->assign(size_t(kB * kH), NAN);
    SparseDecodeProblem p;
    p.q = TensorView::contiguous(q_.data(), DType::kBF16, {kB, 1, kH, 512});
    p.kv = kv;
    p.indices = TensorView::contiguous(main.data(), DType::kInt32, {kB, 1, topk});
    if (!main_len.empty()) p.topk_length = TensorView::contiguous(main_len.data(), DType::kInt32, {kB});
    if (extra_topk > 0) {
      p.extra_kv = *extra_kv;
      p.extra_indices = TensorView::contiguous(extra.data(), DType::kInt32, {kB, 1, extra_topk});
      if (!extra_len.empty()) p.extra_topk_length = TensorView::contiguous(extra_len.data(), DType::kInt32, {kB});
    }
    p.out = TensorView::contiguous(out->data(), DType::kBF16, {kB, 1, kH, 512});
    p.lse = TensorView::contiguous(lse->data(), DType::kFP32, {kB, 1, kH});
    p.softmax_scale = 0.044f;
    const Registry registry = make_default_registry();
    std::vector<uint8_t> ws(64);
    const Status st = registry.get("reference")->run(p, Workspace{ws.data(), ws.size()}, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
  }

  std::unique_ptr<TestCache> main_, extra_, combined_, extra_scaled_;
  std::vector<uint16_t> q_;
};

TEST_P(ExtraCache, IdsSplitBetweenTheCachesEqualOneSetOverTheCombinedCache) {
  const std::vector<int32_t> main = {0, 5, 17, 3, -1, 12};    // [2, 3], rows of the main cache
  const std::vector<int32_t> extra = {9, 9, 19, -7, 1, 16};   // [2, 3], rows of the extra cache
  std::vector<int32_t> all;                                   // [2, 6], combined numbering
  for (int b = 0; b < 2; ++b) {
    for (int k = 0; k < 3; ++k) all.push_back(main[size_t(3 * b + k)]);
    for (int k = 0; k < 3; ++k) {
      const int32_t id = extra[size_t(3 * b + k)];
      all.push_back(id < 0 ? id : int32_t(kMainRows) + id);
    }
  }
  std::vector<uint16_t> out_all, out_split;
  std::vector<float> lse_all, lse_split;
  run(combined_->view, all, nullptr, {}, {}, {}, &out_all, &lse_all);
  run(main_->view, main, &extra_->view, extra, {}, {}, &out_split, &lse_split);
  EXPECT_EQ(out_split, out_all);  // the same keys in the same order: the same bits
  EXPECT_EQ(lse_split, lse_all);
}

TEST_P(ExtraCache, EmptyExtraSetAndAllInvalidMainSet) {
  const std::vector<int32_t> main = {2, 7, 11, 4, 0, 13};
  const std::vector<int32_t> extra = {8, 19, 10, 8, 9, 3};
  const std::vector<int32_t> invalid = {-1, -2, -3, -4, -5, INT32_MIN};
  std::vector<uint16_t> out_ref, out;
  std::vector<float> lse_ref, lse;
  run(main_->view, main, nullptr, {}, {}, {}, &out_ref, &lse_ref);
  run(main_->view, main, &extra_->view, extra, {}, {0, 0}, &out, &lse);  // extra_topk_length 0: no extra key
  EXPECT_EQ(out, out_ref);
  EXPECT_EQ(lse, lse_ref);
  // Every main id invalid: the extra set alone, read with the extra cache's own scale and page size.
  run(extra_scaled_->view, extra, nullptr, {}, {}, {}, &out_ref, &lse_ref);
  run(main_->view, invalid, &extra_scaled_->view, extra, {}, {}, &out, &lse);
  EXPECT_EQ(out, out_ref);
  EXPECT_EQ(lse, lse_ref);
}

TEST_P(ExtraCache, BothLengthsZeroGiveAnEmptyRow) {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  run(main_->view, {1, 2, 3, 4}, &extra_->view, {5, 6}, {0, 2}, {0, 1}, &out, &lse);
  for (int64_t h = 0; h < kH; ++h) {
    EXPECT_EQ(lse[size_t(h)], -INFINITY);  // batch entry 0: no key at all
    for (int64_t c = 0; c < 512; ++c) ASSERT_EQ(out[size_t(h * 512 + c)], 0) << c;
    EXPECT_TRUE(std::isfinite(lse[size_t(kH + h)]));  // batch entry 1 has keys in both sets
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, ExtraCache,
                         ::testing::Values(KvFormat::kFP8DsV4, KvFormat::kBF16, KvFormat::kFP8E4M3),
                         [](const ::testing::TestParamInfo<KvFormat>& info) { return kv_format_name(info.param); });

}  // namespace
}  // namespace mlakit
