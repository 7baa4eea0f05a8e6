// The split cache (kv_c and k_pe in two tensors, docs/spec.md section 4) and the flat block table with
// block_table_indptr (section 1): FlashInfer's layout of the same problem. The reference must give bit for bit
// the result of the usual layout (it reads the same values), validation must name every broken rule of the two
// forms, and the other operations that take a cache read and write the split form too.

#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "common/decode_case.h"
#include "mlakit/numeric.h"
#include "mlakit/problems.h"
#include "reference/kv_rows.h"
#include "reference/ops.h"

namespace mlakit {
namespace {

using test::DecodeCase;
using test::DecodeCaseConfig;
using test::split_case;

DecodeCaseConfig config_for(KvFormat format, int64_t page_size, bool causal) {
  DecodeCaseConfig cfg;
  cfg.seq_lens = {0, 37, 3, 130};  // an empty request, one shorter than s_q, several pages
  cfg.s_q = 2;
  cfg.h_q = 3;
  cfg.page_size = page_size;
  cfg.format = format;
  cfg.q_dtype = format == KvFormat::kFP16 ? DType::kFP16 : DType::kBF16;
  cfg.causal = causal;
  cfg.seed = 11 + uint64_t(page_size);
  return cfg;
}

using FormParam = std::tuple<KvFormat, int64_t, bool, bool>;  // format, page size, split cache, flat table
class SplitForms : public ::testing::TestWithParam<FormParam> {};

TEST_P(SplitForms, ReferenceGivesTheUsualLayoutsResultBitForBit) {
  const auto [format, page_size, split, flat] = GetParam();
  for (bool causal : {false, true}) {
    DecodeCase whole = DecodeCase::generate(config_for(format, page_size, causal));
    DecodeCase other = split_case(whole, split, flat);
    ASSERT_EQ(other.k_pe_cache.empty(), !split);
    ASSERT_EQ(other.table_indptr.empty(), !flat);
    const DecodeProblem p = other.problem();
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    ASSERT_TRUE(reference::decode(whole.problem()).ok());
    ASSERT_TRUE(reference::decode(p).ok());
    EXPECT_EQ(other.out, whole.out);  // the 16-bit patterns; the poison would show as a mismatch
    ASSERT_EQ(other.lse.size(), whole.lse.size());
    EXPECT_EQ(0, std::memcmp(other.lse.data(), whole.lse.data(), whole.lse.size() * sizeof(float)));
  }
}

std::string form_name(const ::testing::TestParamInfo<FormParam>& info) {
  const auto [format, page_size, split, flat] = info.param;
  return std::string(kv_format_name(format)) + "_P" + std::to_string(page_size) + (split ? "_split" : "_joined") +
         (flat ? "_flat" : "_table");
}

INSTANTIATE_TEST_SUITE_P(Forms, SplitForms,
                         ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3),
                                            ::testing::Values(int64_t(1), int64_t(16)), ::testing::Bool(),
                                            ::testing::Bool()),
                         form_name);

/// The row codec writes and reads both parts of a split row, and touches no byte outside them.
TEST(SplitCache, TokenCodecRoundTripsThroughBothParts) {
  KvCacheView kv;
  kv.format = KvFormat::kBF16;
  kv.dims = MlaDims{8, 4};
  std::vector<uint8_t> latent(2 * 3 * 16 + 7, 0xAB), rope(2 * 3 * 8 + 5, 0xCD);
  kv.pages = TensorView::contiguous(latent.data(), DType::kUInt8, {2, 3, 16});
  kv.k_pe = TensorView::contiguous(rope.data(), DType::kUInt8, {2, 3, 8});
  ASSERT_TRUE(kv.split());
  EXPECT_EQ(kv.pages_row_bytes(), 16);
  EXPECT_EQ(kv.k_pe_row_bytes(), 8);
  const std::vector<float> x = {1, -2, 3, -4, 0.5f, 0.25f, 8, 16, -1.5f, 2.5f, 64, -0.125f};
  reference::encode_kv_token(kv, x.data(), 1, 2);
  std::vector<float> back(12);
  reference::decode_kv_token(kv, 1, 2, back.data());
  EXPECT_EQ(back, x);  // all exact in bf16
  for (size_t i = 0; i < latent.size(); ++i) {
    if (i >= (3 + 2) * 16 && i < (3 + 3) * 16) continue;  // page 1 row 2
    EXPECT_EQ(latent[i], 0xAB) << "latent byte " << i;
  }
  for (size_t i = 0; i < rope.size(); ++i) {
    if (i >= (3 + 2) * 8 && i < (3 + 3) * 8) continue;
    EXPECT_EQ(rope[i], 0xCD) << "k_pe byte " << i;
  }
}

/// append_kv and gather_kv on the reference take the split form: what is appended split is gathered back the same.
TEST(SplitCache, AppendThenGatherOnTheReference) {
  constexpr int64_t kTokens = 5, kDc = 16, kDr = 8, kPage = 4;
  KvCacheView kv;
  kv.format = KvFormat::kFP16;
  kv.dims = MlaDims{int(kDc), int(kDr)};
  std::vector<uint8_t> latent(3 * kPage * kDc * 2, 0xFF), rope(3 * kPage * kDr * 2, 0xFF);
  kv.pages = TensorView::contiguous(latent.data(), DType::kUInt8, {3, kPage, kDc * 2});
  kv.k_pe = TensorView::contiguous(rope.data(), DType::kUInt8, {3, kPage, kDr * 2});
  std::vector<float> kv_c(kTokens * kDc), k_pe(kTokens * kDr);
  for (size_t i = 0; i < kv_c.size(); ++i) kv_c[i] = float(int(i % 13) - 6) * 0.25f;
  for (size_t i = 0; i < k_pe.size(); ++i) k_pe[i] = float(int(i % 7) - 3) * 0.5f;
  std::vector<int64_t> slots = {4, 5, 6, 7, 8};  // request 0 lives in pages 1 and 2
  AppendKvProblem a;
  a.kv_c = TensorView::contiguous(kv_c.data(), DType::kFP32, {kTokens, kDc});
  a.k_pe = TensorView::contiguous(k_pe.data(), DType::kFP32, {kTokens, kDr});
  a.slot_mapping = TensorView::contiguous(slots.data(), DType::kInt64, {kTokens});
  a.cache = kv;
  ASSERT_TRUE(a.validate().ok()) << a.validate().to_string();
  ASSERT_TRUE(reference::append_kv(a).ok());

  std::vector<int32_t> table = {1, 2}, lens = {int32_t(kTokens)}, cu = {0, int32_t(kTokens)};
  std::vector<uint16_t> out(kTokens * (kDc + kDr), 0xFFFF);
  GatherKvProblem g;
  g.cache = kv;
  g.block_table = TensorView::contiguous(table.data(), DType::kInt32, {1, 2});
  g.seq_lens = TensorView::contiguous(lens.data(), DType::kInt32, {1});
  g.cu_out = TensorView::contiguous(cu.data(), DType::kInt32, {2});
  g.out = TensorView::contiguous(out.data(), DType::kBF16, {kTokens, kDc + kDr});
  ASSERT_TRUE(g.validate().ok()) << g.validate().to_string();
  ASSERT_TRUE(reference::gather_kv(g).ok());
  for (int64_t t = 0; t < kTokens; ++t) {
    for (int64_t c = 0; c < kDc + kDr; ++c) {
      const float want = c < kDc ? kv_c[size_t(t * kDc + c)] : k_pe[size_t(t * kDr + c - kDc)];
      EXPECT_EQ(bf16_to_float(out[size_t(t * (kDc + kDr) + c)]), want) << "token " << t << " column " << c;
    }
  }
}

/// The engines' layout: one [num_pages, P, d_c + d_r] array, its kv_c and k_pe columns passed as the two parts. The
/// parts' spans overlap but no byte is shared, so append_kv (which writes both) accepts them; a real overlap is refused.
TEST(SplitCache, AppendIntoColumnSlicesOfOneArray) {
  constexpr int64_t kDc = 16, kDr = 8, kPage = 4, kPages = 2, kRow = 2 * (kDc + kDr);
  std::vector<uint8_t> joined(kPages * kPage * kRow, 0xFF);
  KvCacheView kv;
  kv.format = KvFormat::kBF16;
  kv.dims = MlaDims{int(kDc), int(kDr)};
  kv.pages = TensorView::contiguous(joined.data(), DType::kUInt8, {kPages, kPage, 2 * kDc});
  kv.k_pe = TensorView::contiguous(joined.data() + 2 * kDc, DType::kUInt8, {kPages, kPage, 2 * kDr});
  for (TensorView* t : {&kv.pages, &kv.k_pe}) {
    t->stride[0] = kPage * kRow;
    t->stride[1] = kRow;
  }
  std::vector<float> kv_c(kDc), k_pe(kDr);
  for (int64_t i = 0; i < kDc; ++i) kv_c[size_t(i)] = float(i) - 8.0f;
  for (int64_t i = 0; i < kDr; ++i) k_pe[size_t(i)] = 0.5f * float(i);
  std::vector<int64_t> slot = {5};
  AppendKvProblem a;
  a.kv_c = TensorView::contiguous(kv_c.data(), DType::kFP32, {1, kDc});
  a.k_pe = TensorView::contiguous(k_pe.data(), DType::kFP32, {1, kDr});
  a.slot_mapping = TensorView::contiguous(slot.data(), DType::kInt64, {1});
  a.cache = kv;
  ASSERT_TRUE(a.validate().ok()) << a.validate().to_string();
  ASSERT_TRUE(reference::append_kv(a).ok());
  // The joined row 5 (page 1, row 1) reads back as one unsplit bf16 row of d_c + d_r values.
  KvCacheView whole = KvCacheView::contiguous(joined.data(), KvFormat::kBF16, kPages, kPage, kv.dims);
  std::vector<float> back(kDc + kDr);
  reference::decode_kv_token(whole, 1, 1, back.data());
  for (int64_t i = 0; i < kDc + kDr; ++i) EXPECT_EQ(back[size_t(i)], i < kDc ? kv_c[size_t(i)] : k_pe[size_t(i - kDc)]);

  a.cache.k_pe.data = joined.data() + 2 * kDc - 2;  // one bf16 into kv_c's columns: a real overlap
  const Status s = a.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("cache.pages: overlaps cache.k_pe (bytes [", 0), 0u) << s.message();
}

// With one row per page the row stride is never stepped, so it says nothing about where a page's parts end: a page
// stride shorter than kv_c + k_pe puts page n's k_pe on page n + 1's kv_c, which validation must see (it once took
// the unused row stride as the pitch and let append_kv write one page's k_pe over the next page's kv_c).
TEST(SplitCache, ColumnSlicesWithOneRowPerPageMustNotReachTheNextPage) {
  constexpr int64_t kDc = 16, kDr = 8, kPages = 2, kRowBytes = 2 * (kDc + kDr);
  std::vector<uint8_t> joined(kPages * kRowBytes + 64, 0xFF);
  std::vector<float> kv_c(kDc, 1.0f), k_pe(kDr, 2.0f);
  std::vector<int64_t> slot = {0};
  AppendKvProblem a;
  a.kv_c = TensorView::contiguous(kv_c.data(), DType::kFP32, {1, kDc});
  a.k_pe = TensorView::contiguous(k_pe.data(), DType::kFP32, {1, kDr});
  a.slot_mapping = TensorView::contiguous(slot.data(), DType::kInt64, {1});
  a.cache.format = KvFormat::kBF16;
  a.cache.dims = MlaDims{int(kDc), int(kDr)};
  a.cache.pages = TensorView::contiguous(joined.data(), DType::kUInt8, {kPages, 1, 2 * kDc});
  a.cache.k_pe = TensorView::contiguous(joined.data() + 2 * kDc, DType::kUInt8, {kPages, 1, 2 * kDr});
  for (int64_t page_stride : {kRowBytes, 2 * kDc}) {  // rows apart, then page n's k_pe on page n + 1's kv_c
    SCOPED_TRACE("page stride " + std::to_string(page_stride));
    for (TensorView* t : {&a.cache.pages, &a.cache.k_pe}) {
      t->stride[0] = page_stride;
      t->stride[1] = 4 * kRowBytes;  // a row stride that no access steps
    }
    const Status s = a.validate();
    if (page_stride == kRowBytes) {
      EXPECT_TRUE(s.ok()) << s.to_string();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_EQ(s.message().rfind("cache.pages: overlaps cache.k_pe (bytes [", 0), 0u) << s.message();
    }
  }
}

TEST(SplitCache, ExtraKpeWithoutExtraIndicesIsRefused) {
  test::SparseCase c = test::SparseCase::generate(test::SparseCaseConfig{});
  SparseDecodeProblem p = c.problem();
  ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
  std::vector<uint8_t> rope(128);
  p.extra_kv.k_pe = TensorView::contiguous(rope.data(), DType::kUInt8, {1, 1, 128});
  EXPECT_EQ(p.validate().message(), "extra_kv.k_pe=given: needs extra_indices");
}

// ---- validation: each case breaks one rule of the two forms and checks the whole message ----

struct FormRule {
  const char* name;
  void (*mutate)(DecodeProblem&);
  const char* message;
};

class SplitFormValidation : public ::testing::TestWithParam<FormRule> {};

DecodeCase& split_flat_case() {
  static DecodeCase c = [] {
    DecodeCaseConfig cfg;
    cfg.seq_lens = {5, 70};
    cfg.h_q = 4;
    return split_case(DecodeCase::generate(cfg), true, true);
  }();
  return c;
}

TEST(SplitFormValidationBase, ValidProblemPasses) {
  const Status s = split_flat_case().problem().validate();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_P(SplitFormValidation, NamesFieldValueAndRule) {
  DecodeProblem p = split_flat_case().problem();
  GetParam().mutate(p);
  const Status s = p.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  if (GetParam().message != nullptr) {
    EXPECT_EQ(s.message(), GetParam().message);
  } else {  // the alias rule's message holds addresses: its start and its rule
    EXPECT_EQ(s.message().rfind("out: overlaps kv.k_pe (bytes [", 0), 0u) << s.message();
    EXPECT_NE(s.message().find("outputs must not alias inputs"), std::string::npos) << s.message();
  }
}

// split_flat_case: b = 2, P = 64, bf16, pages [num_pages = 6, 64, 1024] + k_pe [6, 64, 128] (rows 144 bytes apart,
// pages 9232 apart), flat table of 5 entries: request 0 at [0, 2), request 1 at [2, 5), each list's last entry -1.
const FormRule kFormRules[] = {
    {"PackedFormatSplit", [](DecodeProblem& p) { p.kv.format = KvFormat::kFP8DsMla; },
     "kv.format=fp8_ds_mla: must be bf16, fp16 or fp8_e4m3 for a split cache (kv.k_pe given): the packed formats "
     "keep scales beside the values in one row"},
    {"WholeRowInPages", [](DecodeProblem& p) { p.kv.pages.shape[2] = 1152; },
     "kv.pages.shape[2]=1152: must equal the kv_c bytes of a split bf16 at d_c=512, d_r=64=1024"},
    {"KpeWidth", [](DecodeProblem& p) { p.kv.k_pe.shape[2] = 64; },
     "kv.k_pe.shape[2]=64: must equal the k_pe bytes of a split bf16 at d_c=512, d_r=64=128"},
    {"KpePages", [](DecodeProblem& p) { p.kv.k_pe.shape[0] = 4; },
     "kv.k_pe.shape[0]=4: must equal kv.pages.shape[0] (num_pages)=6"},
    {"KpePageSize", [](DecodeProblem& p) { p.kv.k_pe.shape[1] = 32; },
     "kv.k_pe.shape[1]=32: must equal kv.pages.shape[1] (page_size)=64"},
    {"KpeDtype", [](DecodeProblem& p) { p.kv.k_pe.dtype = DType::kBF16; },
     "kv.k_pe.dtype=bf16: must be one of uint8"},
    {"KpeRowsOverlap", [](DecodeProblem& p) { p.kv.k_pe.stride[1] = 64; },
     "kv.k_pe.stride[1]=64: must be >= row_bytes=128"},
    {"KpePagesOverlap", [](DecodeProblem& p) { p.kv.k_pe.stride[0] = 4096; },
     "kv.k_pe.stride[0]=4096: must be >= 9200 (pages must not overlap)"},
    {"KpeNoRope", [](DecodeProblem& p) { p.kv.dims.d_r = 0; }, "kv.dims.d_r=0: must be >= 1 for a split cache (kv.k_pe given)"},
    {"IndptrLength", [](DecodeProblem& p) { p.block_table_indptr.shape[0] = 2; },
     "block_table_indptr.shape[0]=2: must equal b + 1=3"},
    {"IndptrDtype", [](DecodeProblem& p) { p.block_table_indptr.dtype = DType::kInt64; },
     "block_table_indptr.dtype=int64: must be one of int32"},
    {"TableNotFlat", [](DecodeProblem& p) { p.block_table.ndim = 2; p.block_table.shape[1] = 1; p.block_table.stride[1] = 1; },
     "block_table.ndim=2: must be 1 ([n] (flat, with block_table_indptr))"},
    {"OutOverKpe", [](DecodeProblem& p) { p.out.data = p.kv.k_pe.data; },
     nullptr},  // message checked below: it holds addresses
};

INSTANTIATE_TEST_SUITE_P(Rules, SplitFormValidation, ::testing::ValuesIn(kFormRules),
                         [](const ::testing::TestParamInfo<FormRule>& info) { return info.param.name; });

TEST(SplitFormValidationContents, IndptrPastTheTable) {
  DecodeCase c = split_flat_case();
  c.table_indptr[2] = 6;  // past the 5 entries
  const Status s = c.problem().validate();
  EXPECT_EQ(s.message(), "block_table_indptr[2]=6: must be in [2, 5] (block_table_indptr[1] .. entries of block_table)");
}

TEST(SplitFormValidationContents, IndptrDecreasing) {
  DecodeCase c = split_flat_case();
  c.table_indptr[1] = 4;
  c.table_indptr[2] = 3;
  const Status s = c.problem().validate();
  EXPECT_EQ(s.message(), "block_table_indptr[2]=3: must be in [4, 5] (block_table_indptr[1] .. entries of block_table)");
}

TEST(SplitFormValidationContents, LengthBeyondTheRequestsPages) {
  DecodeCase c = split_flat_case();
  c.seq_lens[0] = 129;  // request 0 owns 2 entries of the flat list: 128 rows
  EXPECT_EQ(c.problem().validate().message(),
            "seq_lens[0]=129: must be in [0, 128] (the request's pages in block_table_indptr * page_size)");
}

TEST(SplitFormValidationContents, PageOutsideTheCache) {
  DecodeCase c = split_flat_case();
  c.block_table[3] = 99;  // request 1's second page
  EXPECT_EQ(c.problem().validate().message(),
            "block_table[block_table_indptr[1] + 1]=99: must be in [0, 5] (a page of the cache, used by seq_lens[1])");
}

}  // namespace
}  // namespace mlakit
