// docs/spec.md section 9: every rule of validate() rejects a bad field with a message naming the field, the
// value and the rule. Each case starts from a valid problem, breaks exactly one thing, and asserts on the
// full message text; the valid problem itself must pass, so a check that rejects everything fails too.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <functional>
#include <string>
#include <vector>

#include "common/overlap.h"
#include "common/decode_case.h"
#include "core/check.h"
#include "mlakit/problems.h"

namespace mlakit {
namespace {

using test::DecodeCase;
using test::DecodeCaseConfig;

struct DecodeRule {
  const char* name;
  std::function<void(DecodeProblem&)> mutate;
  const char* message;
};

class DecodeValidation : public ::testing::TestWithParam<DecodeRule> {};

DecodeCase& shared_case() {
  static DecodeCase c = [] {
    DecodeCaseConfig cfg;
    cfg.seq_lens = {5, 70};  // b = 2, P = 64: two pages for request 1
    cfg.h_q = 4;
    return DecodeCase::generate(cfg);
  }();
  return c;
}

TEST(DecodeValidationBase, ValidProblemPasses) {
  const Status s = shared_case().problem().validate();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST_P(DecodeValidation, NamesFieldValueAndRule) {
  DecodeProblem p = shared_case().problem();
  GetParam().mutate(p);
  const Status s = p.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), GetParam().message);
}

const DecodeRule kDecodeRules[] = {
    {"QMissing", [](DecodeProblem& p) { p.q = {}; }, "q=missing: is required"},
    {"QDtype", [](DecodeProblem& p) { p.q.dtype = DType::kFP32; }, "q.dtype=fp32: must be one of bf16, fp16"},
    {"QRank", [](DecodeProblem& p) { p.q.ndim = 3; }, "q.ndim=3: must be 4 ([b, s_q, h_q, d_qk])"},
    {"QNull", [](DecodeProblem& p) { p.q.data = nullptr; }, "q.data=null: must point to memory"},
    {"QLastStride", [](DecodeProblem& p) { p.q.stride[3] = 2; }, "q.stride[3]=2: must be 1 (last dimension contiguous)"},
    {"BatchZero", [](DecodeProblem& p) { p.q.shape[0] = 0; }, "b=0: must be in [1, 2147483647] (q.shape[0])"},
    {"SqTooLarge", [](DecodeProblem& p) { p.q.shape[1] = 9; }, "s_q=9: must be in [1, 8] (q.shape[1])"},
    {"HqZero", [](DecodeProblem& p) { p.q.shape[2] = 0; }, "h_q=0: must be in [1, 128] (q.shape[2])"},
    {"HqTooLarge", [](DecodeProblem& p) { p.q.shape[2] = 129; }, "h_q=129: must be in [1, 128] (q.shape[2])"},
    {"QWidth", [](DecodeProblem& p) { p.q.shape[3] = 512; }, "q.shape[3]=512: must equal d_qk = d_c + d_r=576"},
    {"PageSizeNotPowerOfTwo", [](DecodeProblem& p) { p.kv.pages.shape[1] = 48; },
     "page_size=48: must be a power of two in [1, 256] (kv.pages.shape[1])"},
    {"PageSizeTooLarge", [](DecodeProblem& p) { p.kv.pages.shape[1] = 512; },
     "page_size=512: must be a power of two in [1, 256] (kv.pages.shape[1])"},
    {"DsMlaGeometry", [](DecodeProblem& p) { p.kv.format = KvFormat::kFP8DsMla; p.kv.dims.d_c = 256; },
     "kv.format=fp8_ds_mla: needs d_c=512 and d_r=64, got d_c=256, d_r=64"},
    {"OddRope", [](DecodeProblem& p) { p.kv.dims.d_r = 3; }, "kv.dims.d_r=3: must be even and >= 0 (RoPE rotates pairs)"},
    {"ZeroLatent", [](DecodeProblem& p) { p.kv.dims.d_c = 0; }, "kv.dims.d_c=0: must be >= 1"},
    {"CacheDtype", [](DecodeProblem& p) { p.kv.pages.dtype = DType::kBF16; }, "kv.pages.dtype=bf16: must be one of uint8"},
    {"RowBytes", [](DecodeProblem& p) { p.kv.format = KvFormat::kFP8E4M3; },
     "kv.pages.shape[2]=1152: must equal the row bytes of fp8_e4m3 at d_c=512, d_r=64=576"},
    {"RowStride", [](DecodeProblem& p) { p.kv.pages.stride[1] = 1000; }, "kv.pages.stride[1]=1000: must be >= row_bytes=1152"},
    {"PagesOverlap", [](DecodeProblem& p) { p.kv.pages.stride[0] = 1152; },
     "kv.pages.stride[0]=1152: must be >= 73728 (pages must not overlap)"},
    {"Fp8ScaleValue", [](DecodeProblem& p) {
       p.kv.format = KvFormat::kFP8E4M3; p.kv.pages.shape[2] = 576; p.kv.pages.stride[1] = 576;
       p.kv.pages.stride[0] = 64 * 576; p.kv.kv_scale = nullptr; p.kv.kv_scale_value = 0.0f; },
     "kv.kv_scale_value=0: must be finite and > 0 (used when kv_scale is null)"},
    {"BlockTableDtype", [](DecodeProblem& p) { p.block_table.dtype = DType::kInt64; },
     "block_table.dtype=int64: must be one of int32"},
    {"BlockTableBatch", [](DecodeProblem& p) { p.block_table.shape[0] = 3; }, "block_table.shape[0]=3: must equal b=2"},
    {"SeqLensBatch", [](DecodeProblem& p) { p.seq_lens.shape[0] = 1; }, "seq_lens.shape[0]=1: must equal b=2"},
    {"OutDtype", [](DecodeProblem& p) { p.out.dtype = DType::kFP16; }, "out.dtype=fp16: must be one of bf16"},
    {"OutWidth", [](DecodeProblem& p) { p.out.shape[3] = 576; }, "out.shape[3]=576: must equal d_v = d_c=512"},
    {"OutHeads", [](DecodeProblem& p) { p.out.shape[2] = 5; }, "out.shape[2]=5: must equal q.shape[2]=4"},
    {"LseDtype", [](DecodeProblem& p) { p.lse.dtype = DType::kBF16; }, "lse.dtype=bf16: must be one of fp32"},
    {"LseShape", [](DecodeProblem& p) { p.lse.shape[1] = 2; }, "lse.shape[1]=2: must equal q.shape[1]=1"},
    {"ScaleZero", [](DecodeProblem& p) { p.softmax_scale = 0.0f; },
     "softmax_scale=0: must be finite and > 0 (there is no default: pass tau explicitly)"},
    {"ScaleNaN", [](DecodeProblem& p) { p.softmax_scale = NAN; },
     "softmax_scale=nan: must be finite and > 0 (there is no default: pass tau explicitly)"},
    {"DeviceMismatch", [](DecodeProblem& p) { p.out.device = Device::cuda(0); },
     "out.device=cuda:0: must be on the device of q (cpu)"},
    // A tensor's byte range must be addressable: 2 x 2^62 elements x 2 bytes is past 2^63 - 1.
    {"QSpanOverflow", [](DecodeProblem& p) { p.q.stride[0] = int64_t(1) << 62; },
     "q.stride[0]=4611686018427387904: with shape[0]=2 the tensor spans more than 2^63 - 1 bytes"},
    // Found by the validation fuzzer: d_c + d_r overflowed int in kv_row_bytes(); an unknown format had 0-byte rows.
    {"LatentTooWide", [](DecodeProblem& p) { p.kv.dims.d_c = INT32_MAX; },
     "kv.dims.d_c=2147483647: must be <= 65536"},
    {"RopeTooWide", [](DecodeProblem& p) { p.kv.dims.d_r = (1 << 16) + 2; }, "kv.dims.d_r=65538: must be <= 65536"},
    {"UnknownFormat", [](DecodeProblem& p) { p.kv.format = KvFormat(9); },
     "kv.format=9: must be one of bf16, fp16, fp8_e4m3, fp8_ds_mla, fp8_ds_v4"},
    {"OutStrideMin", [](DecodeProblem& p) { p.out.stride[2] = INT64_MIN; },
     "out.stride[2]=-9223372036854775808: with shape[2]=4 the tensor spans more than 2^63 - 1 bytes"},
};
INSTANTIATE_TEST_SUITE_P(Rules, DecodeValidation, ::testing::ValuesIn(kDecodeRules),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(DecodeValidationExtent, BytesBeforeTheAddressSpaceAreRejected) {
  DecodeProblem p = shared_case().problem();
  p.out.stride[0] = -(int64_t(1) << 60);  // 2^61 bytes below a heap pointer: below address 0
  const Status s = p.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("out.data=0x", 0), 0u) << s.message();
  EXPECT_NE(s.message().find(": its strides reach 2305843009213693952 bytes before and 4096 bytes from it, past the "
                             "ends of the address space"),
            std::string::npos)
      << s.message();
}

TEST(DecodeValidationExtent, LargeAndNegativeStridesWithinRangeAreAccepted) {
  // validate() reads no float data: any addressable layout is the caller's to choose (here out rows 1 TiB apart,
  // and lse with its requests in reverse order, data pointing at the last request).
  DecodeCase& c = shared_case();
  DecodeProblem p = c.problem();
  p.out.stride[0] = int64_t(1) << 39;
  p.lse.data = static_cast<float*>(p.lse.data) + 4;
  p.lse.stride[0] = -4;
  const Status s = p.validate();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(TensorViewArithmetic, NumelAndStridesSaturateInsteadOfOverflowing) {
  constexpr int64_t kHuge = int64_t(1) << 40;
  EXPECT_EQ(TensorView::contiguous(nullptr, DType::kFP32, {kHuge, kHuge}).numel(), INT64_MAX);
  EXPECT_EQ(TensorView::contiguous(nullptr, DType::kFP32, {kHuge, kHuge, 0}).numel(), 0);  // empty, whatever else
  const TensorView t = TensorView::contiguous(nullptr, DType::kFP32, {kHuge, kHuge, kHuge});
  EXPECT_EQ(t.stride[0], INT64_MAX);  // 2^80 saturates: validate() then rejects the span
  EXPECT_EQ(t.stride[1], kHuge);
  EXPECT_TRUE(TensorView::contiguous(nullptr, DType::kFP32, {kHuge, kHuge}).is_contiguous());
}

// ---- outputs that overlap inputs (docs/spec.md section 9) ----

using test::byte_span;
using test::overlap;

TEST(DecodeValidationAlias, OutputOverlappingAnInputIsRejected) {
  DecodeProblem p = shared_case().problem();
  p.out.data = p.q.data;  // out is smaller than q: entirely inside it
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "q", p.q, "outputs must not alias inputs"));

  p = shared_case().problem();
  p.out.data = static_cast<uint8_t*>(p.kv.pages.data) + p.kv.pages.stride[0] - 2;  // one element into the last page
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "kv.pages", p.kv.pages, "outputs must not alias inputs"));

  p = shared_case().problem();
  p.lse.data = p.seq_lens.data;
  EXPECT_EQ(p.validate().message(), overlap("lse", p.lse, "seq_lens", p.seq_lens, "outputs must not alias inputs"));

  p = shared_case().problem();
  p.lse.data = static_cast<int32_t*>(p.block_table.data) + 1;
  EXPECT_EQ(p.validate().message(),
            overlap("lse", p.lse, "block_table", p.block_table, "outputs must not alias inputs"));
}

TEST(DecodeValidationAlias, OutputsOverlappingEachOtherAreRejected) {
  DecodeProblem p = shared_case().problem();
  p.lse.data = static_cast<uint16_t*>(p.out.data) + 10;
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "lse", p.lse, "outputs must not alias each other"));
}

TEST(DecodeValidationAlias, ExactAdjacencyIsAccepted) {
  DecodeProblem p = shared_case().problem();
  const int64_t q_elems = p.q.numel(), out_elems = p.out.numel();
  std::vector<uint16_t> shared(size_t(q_elems + out_elems));  // validate() reads neither
  p.q.data = shared.data();
  p.out.data = shared.data() + q_elems;  // out starts at the byte after q's last
  Status s = p.validate();
  EXPECT_TRUE(s.ok()) << s.to_string();
  p.out.data = shared.data() + q_elems - 1;  // one element earlier: they share q's last element
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "q", p.q, "outputs must not alias inputs"));
  p.out.data = shared.data();  // and out just below q, ending where q begins
  p.q.data = shared.data() + out_elems;
  s = p.validate();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(DecodeValidationAlias, StridedOutputInterleavedWithAnInputIsRejectedByRange) {
  // The rule compares byte ranges, not elements: an out whose rows leave gaps overlaps a tensor placed in the gaps,
  // even where they share no element (docs/spec.md section 9).
  DecodeProblem p = shared_case().problem();
  std::vector<uint16_t> shared(size_t(p.out.numel() * 2));
  p.out.data = shared.data();
  p.out.stride[2] = 1024;
  p.out.stride[1] = p.out.stride[0] = 4 * 1024;
  p.lse = {};
  TensorView other = p.out;
  other.data = shared.data() + 512;  // the gaps of out
  p.q = TensorView::contiguous(other.data, DType::kBF16, {2, 1, 4, 576});  // q's bytes run through out's gaps
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "q", p.q, "outputs must not alias inputs"));
}

TEST(DecodeValidationAlias, Fp8ScaleInsideTheOutputIsRejected) {
  DecodeProblem p = shared_case().problem();
  p.kv.format = KvFormat::kFP8E4M3;
  p.kv.pages.shape[2] = 576;
  p.kv.pages.stride[1] = 576;
  p.kv.pages.stride[0] = 64 * 576;
  p.kv.kv_scale = static_cast<const float*>(p.lse.data) + 2;
  const auto at = reinterpret_cast<uintptr_t>(p.kv.kv_scale);
  char scale[64];
  std::snprintf(scale, sizeof scale, "[0x%llx, 0x%llx)", static_cast<unsigned long long>(at),
                static_cast<unsigned long long>(at + 4));
  EXPECT_EQ(p.validate().message(),
            "lse: overlaps kv.kv_scale (bytes " + byte_span(p.lse) + " and " + scale + "): outputs must not alias inputs");
  p.kv.format = KvFormat::kBF16;  // other formats never read kv_scale: it may point anywhere
  p.kv.pages = shared_case().problem().kv.pages;
  EXPECT_TRUE(p.validate().ok());
}

TEST(DecodeValidationAlias, DevicePointersAreCheckedToo) {
  // Host-side address ranges: nothing is read, so device pointers (here placeholders) are compared the same way.
  DecodeProblem p = shared_case().problem();
  for (TensorView* t : {&p.q, &p.kv.pages, &p.block_table, &p.seq_lens, &p.out, &p.lse}) t->device = Device::cuda(0);
  Status s = p.validate();
  EXPECT_TRUE(s.ok()) << s.to_string();
  p.out.data = p.q.data;
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "q", p.q, "outputs must not alias inputs"));
}

TEST(AliasRules, OnlyNonEmptyRangesOnOneDeviceOverlap) {
  std::vector<float> buf(64);
  const TensorView a = TensorView::contiguous(buf.data(), DType::kFP32, {4, 8});
  const TensorView b = TensorView::contiguous(buf.data() + 8, DType::kFP32, {2, 8});
  EXPECT_FALSE(check::disjoint(check::operand(a, "a"), check::operand(b, "b"), "r").ok());
  TensorView b_gpu = b;
  b_gpu.device = Device::cuda(0);  // the same numbers on another device are other memory
  EXPECT_TRUE(check::disjoint(check::operand(a, "a"), check::operand(b_gpu, "b"), "r").ok());
  TensorView empty = b;
  empty.shape[0] = 0;  // no element: spans nothing, whatever its pointer
  EXPECT_TRUE(check::disjoint(check::operand(a, "a"), check::operand(empty, "b"), "r").ok());
  EXPECT_TRUE(check::disjoint(check::operand(a, "a"), check::operand(TensorView{}, "b"), "r").ok());
  // Negative strides: the range runs below the data pointer.
  const TensorView reversed = TensorView::strided(buf.data() + 56, DType::kFP32, {8, 8}, {-8, 1});  // rows upside down
  const check::ByteRange r = check::byte_range(reversed);
  EXPECT_EQ(r.begin, reinterpret_cast<uintptr_t>(buf.data()));
  EXPECT_EQ(r.end, reinterpret_cast<uintptr_t>(buf.data() + 64));
}

// Contents of host-resident integer tensors are checked too (on the CPU only; see docs/spec.md section 9).
// check::self_disjoint and check::elements_meet against brute force: random small views (strides of any sign, zero
// included) are refused exactly when two indices address one element; and two views of one layout meet at another
// index exactly when some pair of their elements coincides with different indices.
TEST(AliasRules, ElementSearchMatchesBruteForce) {
  std::mt19937_64 rng(2026);
  std::vector<float> buffer(4096);
  int refused = 0, meets = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const int ndim = 1 + int(rng() % 3);
    int64_t shape[3] = {1, 1, 1}, stride[3] = {0, 0, 0};
    for (int d = 0; d < ndim; ++d) {
      shape[d] = 1 + int64_t(rng() % 5);
      stride[d] = int64_t(rng() % 25) - 12;
    }
    stride[ndim - 1] = 1;  // tensor(): the last dimension contiguous
    std::vector<int64_t> offsets;  // every element's offset, in elements
    for (int64_t i = 0; i < shape[0]; ++i)
      for (int64_t j = 0; j < shape[1]; ++j)
        for (int64_t k = 0; k < shape[2]; ++k) offsets.push_back(i * stride[0] + j * stride[1] + k * stride[2]);
    const int64_t lowest = *std::min_element(offsets.begin(), offsets.end());
    TensorView t = TensorView::strided(buffer.data() + 1024 - lowest, DType::kFP32, {shape[0], shape[1], shape[2]},
                                       {stride[0], stride[1], stride[2]});
    t.ndim = ndim;  // the first ndim dimensions
    std::vector<int64_t> sorted = offsets;
    std::sort(sorted.begin(), sorted.end());
    const bool repeats = std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end();
    ASSERT_EQ(!check::self_disjoint(t, "t").ok(), repeats) << "trial " << trial;
    refused += repeats;
    if (repeats) continue;
    // The same layout at `delta` elements: an element of one on an element of the other with another index?
    const int64_t delta = int64_t(rng() % 41) - 20;
    bool other_index = false;
    for (size_t a = 0; a < offsets.size(); ++a)
      for (size_t b = 0; b < offsets.size(); ++b) other_index = other_index || (a != b && offsets[b] + delta == offsets[a]);
    ASSERT_EQ(check::elements_meet(check::index_differences(t), delta) == 1, other_index) << "trial " << trial;
    meets += other_index;
  }
  EXPECT_GT(refused, 100);  // both answers are common, so the comparison means something
  EXPECT_GT(meets, 100);
}

TEST(DecodeValidationContents, SeqLenBeyondTable) {
  DecodeCase& c = shared_case();
  DecodeProblem p = c.problem();
  const int32_t saved = c.seq_lens[1];
  const int64_t limit = p.block_table.shape[1] * p.kv.page_size();
  c.seq_lens[1] = int32_t(limit + 1);
  const Status s = p.validate();
  c.seq_lens[1] = saved;
  EXPECT_EQ(s.message(), "seq_lens[1]=" + std::to_string(limit + 1) + ": must be in [0, " + std::to_string(limit) +
                             "] (max_pages * page_size)");
}

TEST(DecodeValidationContents, NegativeSeqLen) {
  DecodeCase& c = shared_case();
  DecodeProblem p = c.problem();
  const int64_t limit = p.block_table.shape[1] * p.kv.page_size();
  const int32_t saved = c.seq_lens[0];
  c.seq_lens[0] = -1;
  const Status s = p.validate();
  c.seq_lens[0] = saved;
  EXPECT_EQ(s.message(), "seq_lens[0]=-1: must be in [0, " + std::to_string(limit) + "] (max_pages * page_size)");
}

TEST(DecodeValidationContents, PageOutsideCache) {
  DecodeCase& c = shared_case();
  DecodeProblem p = c.problem();
  const int64_t row1 = c.table_row_stride;  // request 1 uses two pages; break its second
  const int32_t saved = c.block_table[size_t(row1 + 1)];
  c.block_table[size_t(row1 + 1)] = int32_t(c.num_pages);
  const Status s = p.validate();
  c.block_table[size_t(row1 + 1)] = saved;
  EXPECT_EQ(s.message(), "block_table[1][1]=" + std::to_string(c.num_pages) + ": must be in [0, " +
                             std::to_string(c.num_pages - 1) + "] (a page of the cache, used by seq_lens[1])");
}

TEST(DecodeValidationContents, PagesPastTheLengthAreNotChecked) {
  DecodeCase& c = shared_case();
  // Request 0 has 5 tokens: only its first page is in use; -1 after it is the documented padding.
  EXPECT_EQ(c.block_table[1], test::kUnusedPage);
  EXPECT_TRUE(c.problem().validate().ok());
}

}  // namespace
}  // namespace mlakit
