// docs/spec.md section 9 for the operations other than dense decode: one valid problem per operation (which
// must pass), then one broken field at a time with the exact message expected.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "common/overlap.h"
#include "mlakit/problems.h"

namespace mlakit {
namespace {

constexpr MlaDims kSmall{8, 4};  // d_qk = 12: the reference and validation accept any geometry
constexpr int64_t kP = 4, kPages = 3;

/// Host buffers big enough for every small problem below (contents are never read as values here).
struct Arena {
  std::vector<uint16_t> h16 = std::vector<uint16_t>(4096, 0);
  std::vector<uint16_t> h16b = std::vector<uint16_t>(4096, 0);
  std::vector<float> f32 = std::vector<float>(4096, 0.0f);
  std::vector<float> f32b = std::vector<float>(4096, 0.0f);
  std::vector<uint8_t> cache = std::vector<uint8_t>(kPages * kP * 2 * 12, 0);
  std::vector<int32_t> i32 = std::vector<int32_t>(64, 0);
  std::vector<int32_t> i32b = std::vector<int32_t>(64, 0);
  std::vector<int64_t> i64 = std::vector<int64_t>(64, 0);
  std::vector<int64_t> i64b = std::vector<int64_t>(64, 0);
  std::vector<uint8_t> u8 = std::vector<uint8_t>(4096, 0);
};

KvCacheView small_cache(Arena& a) { return KvCacheView::contiguous(a.cache.data(), KvFormat::kBF16, kPages, kP, kSmall); }

template <typename Problem>
struct Rule {
  const char* name;
  std::function<void(Problem&, Arena&)> mutate;
  std::string message;
};

template <typename Problem>
void check_rules(const std::function<Problem(Arena&)>& make, const std::vector<Rule<Problem>>& rules) {
  {
    Arena a;
    const Status s = make(a).validate();
    ASSERT_TRUE(s.ok()) << "the valid problem is rejected: " << s.to_string();
  }
  for (const Rule<Problem>& r : rules) {
    SCOPED_TRACE(r.name);
    Arena a;
    Problem p = make(a);
    r.mutate(p, a);
    const Status s = p.validate();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), r.message);
  }
}

SparseDecodeProblem make_sparse(Arena& a) {  // b = 2, s_q = 1, h_q = 3, topk = 4
  SparseDecodeProblem p;
  p.q = TensorView::contiguous(a.h16.data(), DType::kBF16, {2, 1, 3, kSmall.d_qk()});
  p.kv = small_cache(a);
  p.indices = TensorView::contiguous(a.i32.data(), DType::kInt32, {2, 1, 4});
  a.i32[1] = -1;
  a.i32[2] = int32_t(kPages * kP - 1);
  p.topk_length = TensorView::contiguous(a.i32b.data(), DType::kInt32, {2});
  a.i32b[0] = 4;
  a.i32[4 + 3] = 1000;  // request 1 uses no column (topk_length 0): its ids are ignored, never checked
  p.attn_sink = TensorView::contiguous(a.f32.data(), DType::kFP32, {3});
  p.out = TensorView::contiguous(a.h16b.data(), DType::kBF16, {2, 1, 3, kSmall.d_v()});
  p.lse = TensorView::contiguous(a.f32b.data(), DType::kFP32, {2, 1, 3});
  p.softmax_scale = 0.1f;
  return p;
}

TEST(SparseValidation, Rules) {
  check_rules<SparseDecodeProblem>(make_sparse, {
      {"IndexPastCache", [](auto&, Arena& a) { a.i32[3] = 12; },
       "indices[0][0][3]=12: must be < num_pages * page_size=12 (negative means no key)"},
      {"IndexPastCacheSecondRequest", [](auto&, Arena& a) { a.i32b[1] = 2; a.i32[5] = 99; },
       "indices[1][0][1]=99: must be < num_pages * page_size=12 (negative means no key)"},
      {"IndicesBatch", [](auto& p, Arena&) { p.indices.shape[0] = 1; }, "indices.shape[0]=1: must equal b=2"},
      {"IndicesDtype", [](auto& p, Arena&) { p.indices.dtype = DType::kInt64; }, "indices.dtype=int64: must be one of int32"},
      {"TopkZero", [](auto& p, Arena&) { p.indices.shape[2] = 0; }, "topk=0: must be in [1, 2147483647] (indices.shape[2])"},
      {"TopkLength", [](auto&, Arena& a) { a.i32b[1] = 5; }, "topk_length[1]=5: must be in [0, 4] (topk)"},
      {"SinkShape", [](auto& p, Arena&) { p.attn_sink.shape[0] = 4; }, "attn_sink.shape[0]=4: must equal h_q=3"},
      {"SinkDtype", [](auto& p, Arena&) { p.attn_sink.dtype = DType::kBF16; }, "attn_sink.dtype=bf16: must be one of fp32"},
  });
}

PrefillProblem make_prefill(Arena& a) {  // b = 2: Lq = {2, 1}, Lk = {3, 4}; h_q = 2, d = 6, d_vh = 5
  PrefillProblem p;
  p.q = TensorView::contiguous(a.h16.data(), DType::kBF16, {3, 2, 6});
  p.k = TensorView::contiguous(a.h16b.data(), DType::kBF16, {7, 2, 6});
  p.v = TensorView::contiguous(a.h16b.data() + 1024, DType::kBF16, {7, 2, 5});
  p.cu_seqlens_q = TensorView::contiguous(a.i32.data(), DType::kInt32, {3});
  p.cu_seqlens_k = TensorView::contiguous(a.i32b.data(), DType::kInt32, {3});
  a.i32[0] = 0, a.i32[1] = 2, a.i32[2] = 3;
  a.i32b[0] = 0, a.i32b[1] = 3, a.i32b[2] = 7;
  p.out = TensorView::contiguous(a.h16.data() + 2048, DType::kBF16, {3, 2, 5});
  p.lse = TensorView::contiguous(a.f32.data(), DType::kFP32, {3, 2});
  p.softmax_scale = 0.2f;
  p.causal = true;
  return p;
}

TEST(PrefillValidation, Rules) {
  check_rules<PrefillProblem>(make_prefill, {
      {"KeysShorterThanQueries", [](auto&, Arena& a) { a.i32b[1] = 1; },
       "Lk[0]=1: must be >= Lq[0]=2 (queries are the last tokens of their sequence)"},
      {"CuDecreasing", [](auto&, Arena& a) { a.i32[2] = 1; },
       "cu_seqlens_q[2]=1: must be in [2, 3] (non-decreasing and within the 3 tokens)"},
      {"CuStart", [](auto&, Arena& a) { a.i32b[0] = 1; }, "cu_seqlens_k[0]=1: must be in [0, 0] (prefix sums start at 0)"},
      {"CuLength", [](auto& p, Arena&) { p.cu_seqlens_k.shape[0] = 2; }, "cu_seqlens_k.shape[0]=2: must equal b + 1=3"},
      {"KvDtype", [](auto& p, Arena&) { p.k.dtype = DType::kFP16; }, "k.dtype=fp16: must be one of bf16"},
      {"VTokens", [](auto& p, Arena&) { p.v.shape[0] = 6; }, "v.shape[0]=6: must equal T_k=7"},
      {"OutWidth", [](auto& p, Arena&) { p.out.shape[2] = 6; }, "out.shape[2]=6: must equal d_vh=5"},
      {"HeadsZero", [](auto& p, Arena&) { p.q.shape[1] = 0; }, "h_q=0: must be in [1, 128] (q.shape[1])"},
      {"Scale", [](auto& p, Arena&) { p.softmax_scale = -0.5f; },
       "softmax_scale=-0.5: must be finite and > 0 (there is no default: pass tau explicitly)"},
  });
}

MergeProblem make_merge(Arena& a) {  // n = 3 parts, 4 rows, d = 5
  MergeProblem p;
  p.parts_out = TensorView::contiguous(a.f32.data(), DType::kFP32, {3, 4, 5});
  p.parts_lse = TensorView::contiguous(a.f32b.data(), DType::kFP32, {3, 4});
  p.out = TensorView::contiguous(a.h16.data(), DType::kBF16, {4, 5});
  p.lse = TensorView::contiguous(a.f32b.data() + 64, DType::kFP32, {4});
  return p;
}

TEST(MergeValidation, Rules) {
  check_rules<MergeProblem>(make_merge, {
      {"NoParts", [](auto& p, Arena&) { p.parts_out.shape[0] = 0; p.parts_lse.shape[0] = 0; },
       "parts_out.shape[0]=0: must be in [1, 2147483647] (n, the number of parts)"},
      {"LseParts", [](auto& p, Arena&) { p.parts_lse.shape[0] = 2; }, "parts_lse.shape[0]=2: must equal n=3"},
      {"OutRows", [](auto& p, Arena&) { p.out.shape[0] = 3; }, "out.shape[0]=3: must equal rows=4"},
      {"OutDtype", [](auto& p, Arena&) { p.out.dtype = DType::kInt32; }, "out.dtype=int32: must be one of fp32, bf16, fp16"},
      {"LseRows", [](auto& p, Arena&) { p.lse.shape[0] = 5; }, "lse.shape[0]=5: must equal rows=4"},
  });
}

MergePairProblem make_pair(Arena& a) {  // 4 rows, d = 5, in place into a
  MergePairProblem p;
  p.out_a = TensorView::contiguous(a.f32.data(), DType::kFP32, {4, 5});
  p.lse_a = TensorView::contiguous(a.f32b.data(), DType::kFP32, {4});
  p.out_b = TensorView::contiguous(a.f32.data() + 64, DType::kFP32, {4, 5});
  p.lse_b = TensorView::contiguous(a.f32b.data() + 64, DType::kFP32, {4});
  p.out = p.out_a;
  p.lse = p.lse_a;
  return p;
}

TEST(MergePairValidation, Rules) {
  check_rules<MergePairProblem>(make_pair, {
      {"BDtype", [](auto& p, Arena& a) { p.out_b = TensorView::contiguous(a.h16.data(), DType::kBF16, {4, 5}); },
       "out_b.dtype=bf16: must be one of fp32"},
      {"BRows", [](auto& p, Arena&) { p.out_b.shape[0] = 3; }, "out_b.shape[0]=3: must equal rows=4"},
      {"LseB", [](auto& p, Arena&) { p.lse_b = {}; }, "lse_b=missing: is required"},
      {"OutWidth", [](auto& p, Arena&) { p.out.shape[1] = 4; }, "out.shape[1]=4: must equal d=5"},
  });
}

AppendKvProblem make_append(Arena& a) {  // T = 3 tokens, fused RoPE with max_pos 8, q with 2 heads
  AppendKvProblem p;
  p.kv_c = TensorView::contiguous(a.h16.data(), DType::kBF16, {3, kSmall.d_c});
  p.k_pe = TensorView::contiguous(a.h16.data() + 512, DType::kBF16, {3, kSmall.d_r});
  p.slot_mapping = TensorView::contiguous(a.i64.data(), DType::kInt64, {3});
  a.i64[0] = 0, a.i64[1] = -1, a.i64[2] = kPages * kP - 1;
  p.cache = small_cache(a);
  p.positions = TensorView::contiguous(a.i64b.data(), DType::kInt64, {3});
  a.i64b[0] = 0, a.i64b[1] = 7, a.i64b[2] = 3;
  p.cos_sin = TensorView::contiguous(a.f32.data(), DType::kFP32, {8, kSmall.d_r});
  p.q = TensorView::contiguous(a.h16b.data(), DType::kBF16, {3, 2, kSmall.d_qk()});
  p.q_fp8 = TensorView::contiguous(a.u8.data(), DType::kFP8E4M3, {3, 2, kSmall.d_qk()});
  return p;
}

TEST(AppendKvValidation, Rules) {
  check_rules<AppendKvProblem>(make_append, {
      {"SlotPastCache", [](auto&, Arena& a) { a.i64[2] = kPages * kP; },
       "slot_mapping[2]=12: must be < num_pages * page_size=12 (negative skips the token)"},
      {"SlotDtype", [](auto& p, Arena&) { p.slot_mapping.dtype = DType::kInt32; }, "slot_mapping.dtype=int32: must be one of int64"},
      {"PositionPastTable", [](auto&, Arena& a) { a.i64b[1] = 8; }, "positions[1]=8: must be in [0, 7] (rows of cos_sin)"},
      {"NegativePosition", [](auto&, Arena& a) { a.i64b[0] = -3; }, "positions[0]=-3: must be in [0, 7] (rows of cos_sin)"},
      {"TableWidth", [](auto& p, Arena&) { p.cos_sin.shape[1] = 6; p.cos_sin.stride[0] = 6; }, "cos_sin.shape[1]=6: must equal d_r=4"},
      {"NoTable", [](auto& p, Arena&) { p.cos_sin = {}; }, "cos_sin=missing: is required"},
      {"KpeWidth", [](auto& p, Arena&) { p.k_pe.shape[1] = 6; }, "k_pe.shape[1]=6: must equal d_r=4"},
      {"KvcWidth", [](auto& p, Arena&) { p.kv_c.shape[1] = 7; }, "kv_c.shape[1]=7: must equal d_c=8"},
      {"QFp8WithoutQ", [](auto& p, Arena&) { p.q = {}; }, "q=missing: is required when q_fp8 is given"},
      {"QScale", [](auto& p, Arena&) { p.q_scale_value = INFINITY; },
       "q_scale_value=inf: must be finite and > 0 (used when q_scale is null)"},
      {"QWidth", [](auto& p, Arena&) { p.q.shape[2] = 8; }, "q.shape[2]=8: must equal d_qk = d_c + d_r=12"},
      {"UnknownRopeStyle", [](auto& p, Arena&) { p.rope_style = RopeStyle(2); },
       "rope_style=2: must be interleaved (0) or neox (1)"},
  });
}

RopeProblem make_rope(Arena& a) {  // T = 2, H = 3, d_r = 4 (a strided view of a wider tensor)
  RopeProblem p;
  p.x = TensorView::contiguous(a.f32.data(), DType::kFP32, {2, 3, 4});
  p.x.stride[1] = 12;
  p.x.stride[0] = 36;
  p.positions = TensorView::contiguous(a.i64.data(), DType::kInt64, {2});
  a.i64[1] = 5;
  p.cos_sin = TensorView::contiguous(a.f32b.data(), DType::kFP32, {6, 4});
  return p;
}

TEST(RopeValidation, Rules) {
  check_rules<RopeProblem>(make_rope, {
      {"OddWidth", [](auto& p, Arena&) { p.x.shape[2] = 3; }, "d_r=3: must be even (RoPE rotates pairs)"},
      {"PositionPastTable", [](auto&, Arena& a) { a.i64[0] = 6; }, "positions[0]=6: must be in [0, 5] (rows of cos_sin)"},
      {"StridedTable", [](auto& p, Arena&) { p.cos_sin.stride[0] = 8; }, "cos_sin.stride[0]=8: must be d_r (contiguous)"},
      {"IntX", [](auto& p, Arena&) { p.x.dtype = DType::kInt32; }, "x.dtype=int32: must be one of bf16, fp16, fp32"},
      {"UnknownStyle", [](auto& p, Arena&) { p.style = RopeStyle(7); }, "style=7: must be interleaved (0) or neox (1)"},
  });
}

GatherKvProblem make_gather(Arena& a) {  // b = 2, L = {3, 5}, P = 4: pages {2}, {0, 1}
  GatherKvProblem p;
  p.cache = small_cache(a);
  p.block_table = TensorView::contiguous(a.i32.data(), DType::kInt32, {2, 2});
  a.i32[0] = 2, a.i32[1] = -1, a.i32[2] = 0, a.i32[3] = 1;
  p.seq_lens = TensorView::contiguous(a.i32b.data(), DType::kInt32, {2});
  a.i32b[0] = 3, a.i32b[1] = 5;
  p.cu_out = TensorView::contiguous(a.i32b.data() + 8, DType::kInt32, {3});
  a.i32b[8] = 0, a.i32b[9] = 3, a.i32b[10] = 8;
  p.out = TensorView::contiguous(a.h16.data(), DType::kBF16, {8, kSmall.d_qk()});
  return p;
}

TEST(GatherKvValidation, Rules) {
  check_rules<GatherKvProblem>(make_gather, {
      {"CuMismatch", [](auto&, Arena& a) { a.i32b[10] = 7; },
       "cu_out[2]=7: must be in [8, 8] (must equal cu_out[1] + seq_lens[1])"},
      {"OutTooSmall", [](auto& p, Arena&) { p.out.shape[0] = 7; },
       "cu_out[2]=8: must be in [0, 7] (total rows must fit in out.shape[0])"},
      {"OutDtype", [](auto& p, Arena&) { p.out.dtype = DType::kFP16; }, "out.dtype=fp16: must be one of bf16"},
      {"PageOutside", [](auto&, Arena& a) { a.i32[3] = 3; },
       "block_table[1][1]=3: must be in [0, 2] (a page of the cache, used by seq_lens[1])"},
      {"PagePadding", [](auto&, Arena& a) { a.i32[2] = -1; },
       "block_table[1][0]=-1: must be in [0, 2] (a page of the cache, used by seq_lens[1])"},
  });
}

// ---- outputs that overlap inputs (docs/spec.md section 9), and the in-place forms that stay allowed ----

using test::overlap;

template <typename Problem>
void expect_ok(const Problem& p) {
  const Status s = p.validate();
  EXPECT_TRUE(s.ok()) << s.to_string();
}

TEST(AliasValidation, SparseDecode) {
  Arena a;
  SparseDecodeProblem p = make_sparse(a);
  p.out.data = a.i32.data();  // over the indices (all ids stay valid: the check is by address, not by value)
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "indices", p.indices));
  p = make_sparse(a);
  p.lse.data = a.f32.data() + 2;  // over attn_sink's last head
  EXPECT_EQ(p.validate().message(), overlap("lse", p.lse, "attn_sink", p.attn_sink));
  p = make_sparse(a);
  p.lse.data = static_cast<uint8_t*>(p.out.data) + p.out.numel() * 2;  // lse right after out: adjacent, allowed
  expect_ok(p);
}

TEST(AliasValidation, Prefill) {
  Arena a;
  PrefillProblem p = make_prefill(a);
  p.out.data = a.h16b.data() + 80;  // into k's last head
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "k", p.k));
  p = make_prefill(a);
  p.lse.data = a.i32.data();
  EXPECT_EQ(p.validate().message(), overlap("lse", p.lse, "cu_seqlens_q", p.cu_seqlens_q));
  p = make_prefill(a);
  p.out.data = a.h16.data() + 3 * 2 * 6;  // right after q
  expect_ok(p);
}

TEST(AliasValidation, MergeInPlaceIsExactlyPartZero) {
  Arena a;
  MergeProblem p = make_merge(a);
  p.out = TensorView::contiguous(a.f32.data(), DType::kFP32, {4, 5});  // part 0 of parts_out: in place
  p.lse = TensorView::contiguous(a.f32b.data(), DType::kFP32, {4});    // part 0 of parts_lse
  expect_ok(p);
  const std::string in_place = "outputs must not alias inputs (in place: out is exactly part 0 of parts_out)";
  MergeProblem q = p;
  q.out.data = a.f32.data() + 20;  // part 1: not the in-place form
  EXPECT_EQ(q.validate().message(), overlap("out", q.out, "parts_out", q.parts_out, in_place));
  q = p;
  q.out.dtype = DType::kBF16;  // part 0's address but another dtype: elements would be written before they are read
  EXPECT_EQ(q.validate().message(), overlap("out", q.out, "parts_out", q.parts_out, in_place));
  q = p;
  q.out.stride[0] = 6;  // part 0's address, other strides
  q.out.data = a.f32.data();
  EXPECT_EQ(q.validate().message(), overlap("out", q.out, "parts_out", q.parts_out, in_place));
  q = p;
  q.lse.data = a.f32b.data() + 1;
  EXPECT_EQ(q.validate().message(),
            overlap("lse", q.lse, "parts_lse", q.parts_lse,
                    "outputs must not alias inputs (in place: lse is exactly part 0 of parts_lse)"));
  q = p;
  q.lse.data = a.f32.data() + 3;  // lse inside part 0 of parts_out, which out (in place) also is
  EXPECT_EQ(q.validate().message(), overlap("out", q.out, "lse", q.lse, "outputs must not alias each other"));
  q = make_merge(a);
  q.out.data = a.f32b.data() + 4;  // bf16 out over parts_lse
  EXPECT_EQ(q.validate().message(), overlap("out", q.out, "parts_lse", q.parts_lse));
}

TEST(AliasValidation, EmptyTensorsNeverOverlap) {
  Arena a;
  MergeProblem p = make_merge(a);  // no rows: nothing is read or written, whatever the pointers
  p.parts_out.shape[1] = 0;
  p.parts_lse.shape[1] = 0;
  p.out.shape[0] = 0;
  p.lse.shape[0] = 0;
  p.out.data = a.f32.data() + 7;
  p.lse.data = a.f32b.data() + 1;
  expect_ok(p);
}

constexpr const char* kPairOutRule =
    "outputs must not alias inputs (in place: out is exactly out_a or out_b, and meets no element of the other)";
constexpr const char* kPairLseRule =
    "outputs must not alias inputs (in place: lse is exactly lse_a or lse_b, and meets no element of the other)";

TEST(AliasValidation, MergePairInPlaceIsExactlyAOrB) {
  Arena a;
  MergePairProblem p = make_pair(a);  // in place into a: allowed
  expect_ok(p);
  MergePairProblem q = p;
  q.out = q.out_b;  // in place into b: allowed too (the CUDA merge tests run it)
  q.lse = q.lse_b;
  expect_ok(q);
  q = p;
  q.out.data = a.f32.data() + 5;  // a shifted by one row
  EXPECT_EQ(q.validate().message(),
            overlap("out", q.out, "out_a", q.out_a, kPairOutRule));
  q = p;
  q.out = TensorView::strided(a.f32.data() + 64, DType::kFP32, {4, 5}, {6, 1});  // out_b's address, other strides
  EXPECT_EQ(q.validate().message(),
            overlap("out", q.out, "out_b", q.out_b, kPairOutRule));
  q = p;
  q.lse = TensorView::contiguous(a.f32b.data() + 65, DType::kFP32, {4});  // lse_b shifted by one
  EXPECT_EQ(q.validate().message(),
            overlap("lse", q.lse, "lse_b", q.lse_b, kPairLseRule));
  q = p;
  q.lse = TensorView::contiguous(a.f32.data() + 10, DType::kFP32, {4});  // inside out (== out_a): outputs collide
  EXPECT_EQ(q.validate().message(), overlap("out", q.out, "lse", q.lse, "outputs must not alias each other"));
}

/// The refusal of an in-place merge whose part 1 (the only other, one part of `parts` at `rest_data`) meets `view`.
std::string in_place_meets(const std::string& name, const TensorView& view, const std::string& parts_name,
                           TensorView parts, void* rest_data) {
  parts.data = rest_data;
  parts.shape[0] = 1;
  return overlap(name, view, parts_name + "[1:]", parts,
                 "in place, " + name + " (part 0 of " + parts_name + ") must not meet the other parts' elements");
}

// In place, the other inputs must keep off out (lse): a part that starts inside part 0, or an out_b shifted against
// out_a, would be read after out overwrote it (the reference then returned 0.5 1.25 2.125 ... instead of 0.5 1.5 2.5).
TEST(AliasValidation, InPlaceMergeKeepsTheOtherPartsOff) {
  Arena a;
  MergeProblem p = make_merge(a);
  p.parts_out = TensorView::strided(a.f32.data() + 1, DType::kFP32, {2, 4, 5}, {-1, 5, 1});  // part 1 one float lower
  p.parts_lse = TensorView::contiguous(a.f32b.data(), DType::kFP32, {2, 4});
  p.out = TensorView::contiguous(a.f32.data() + 1, DType::kFP32, {4, 5});  // exactly part 0
  p.lse = TensorView::contiguous(a.f32b.data() + 64, DType::kFP32, {4});
  EXPECT_EQ(p.validate().message(), in_place_meets("out", p.out, "parts_out", p.parts_out, a.f32.data()));
  p.parts_out = TensorView::contiguous(a.f32.data(), DType::kFP32, {2, 4, 5});
  p.out = TensorView::contiguous(a.h16.data(), DType::kBF16, {4, 5});
  p.parts_lse = TensorView::strided(a.f32b.data() + 1, DType::kFP32, {2, 4}, {-1, 1});
  p.lse = TensorView::contiguous(a.f32b.data() + 1, DType::kFP32, {4});  // exactly part 0 of parts_lse
  EXPECT_EQ(p.validate().message(), in_place_meets("lse", p.lse, "parts_lse", p.parts_lse, a.f32b.data()));
  p.parts_lse = TensorView::contiguous(a.f32b.data(), DType::kFP32, {2, 4});
  p.lse = TensorView::contiguous(a.f32b.data(), DType::kFP32, {4});
  expect_ok(p);

  // Interleaved parts of one [rows, n, d] array (FlashInfer's merge_states layout): part 1 lies between part 0's rows
  // but on none of its elements.
  p.parts_out = TensorView::strided(a.f32.data(), DType::kFP32, {2, 4, 5}, {5, 10, 1});
  p.out = TensorView::strided(a.f32.data(), DType::kFP32, {4, 5}, {10, 1});
  p.parts_lse = TensorView::contiguous(a.f32b.data(), DType::kFP32, {2, 4});  // an lse row must be contiguous
  p.lse = TensorView::contiguous(a.f32b.data(), DType::kFP32, {4});
  expect_ok(p);
  p.parts_out.stride[0] = 0;  // every part the same memory: each element read from all before it is written
  expect_ok(p);

  MergePairProblem q = make_pair(a);  // in place into a
  q.out_b = TensorView::contiguous(a.f32.data() + 1, DType::kFP32, {4, 5});  // b one float above a
  EXPECT_EQ(q.validate().message(), overlap("out", q.out, "out_b", q.out_b, kPairOutRule));
  q.out_b = q.out_a;  // the same elements: each is read from both before it is written
  expect_ok(q);
  q.out_a = q.out = TensorView::strided(a.f32.data(), DType::kFP32, {4, 5}, {10, 1});  // two interleaved columns
  q.out_b = TensorView::strided(a.f32.data() + 5, DType::kFP32, {4, 5}, {10, 1});
  expect_ok(q);
  q.out_b.data = a.f32.data() + 4;  // then shifted by one: b's [0, 4] is a's [1, 0]
  EXPECT_EQ(q.validate().message(), overlap("out", q.out, "out_b", q.out_b, kPairOutRule));
  q = make_pair(a);
  q.lse_b = TensorView::contiguous(a.f32b.data() + 1, DType::kFP32, {4});
  EXPECT_EQ(q.validate().message(), overlap("lse", q.lse, "lse_b", q.lse_b, kPairLseRule));
}

// An output whose elements share bytes (a stride of 0, or two indices on one element) would be written twice: RoPE
// rotated x's shared head twice, a GPU kernel's threads would race. Permuted, padded and interleaved layouts whose
// indices never meet are fine.
TEST(AliasValidation, OutputsMustNotOverlapThemselves) {
  Arena a;
  RopeProblem r = make_rope(a);  // x [2, 3, 4], strides {36, 12, 1}
  r.x.stride[1] = 0;
  EXPECT_EQ(r.validate().message(),
            "x.stride[1]=0: an output's elements must not overlap (a stride of 0 repeats them)");
  r = make_rope(a);
  r.x.stride[0] = 12;  // tokens as far apart as heads: token 1's head 0 is token 0's head 1
  EXPECT_EQ(r.validate().message(),
            "x.stride[1]=12: an output's elements must not overlap (two of its indices address one element: dimension "
            "1 steps inside the span of dimension 0)");
  r = make_rope(a);
  r.x.stride[0] = 20;  // tokens 20 floats apart, inside the 28 a token's heads span, but on none of their elements
  expect_ok(r);
  r = make_rope(a);
  r.x.stride[0] = 4;  // heads outermost: tokens 4 floats apart, heads 8
  r.x.stride[1] = 8;
  expect_ok(r);
  r.x.stride[0] = -4;  // and backwards
  r.x.data = a.f32.data() + 4;
  expect_ok(r);
  MergePairProblem q = make_pair(a);
  q.out = TensorView::contiguous(a.h16.data(), DType::kBF16, {4, 5});
  q.out.stride[0] = 3;
  EXPECT_EQ(q.validate().message(),
            "out.stride[0]=3: an output's elements must not overlap (two of its indices address one element: "
            "dimension 0 steps inside the span of dimension 1)");
  q.out.stride[0] = 0;  // every row on the same bytes
  EXPECT_EQ(q.validate().message(),
            "out.stride[0]=0: an output's elements must not overlap (a stride of 0 repeats them)");
}

TEST(AliasValidation, AppendKv) {
  Arena a;
  AppendKvProblem p = make_append(a);
  p.q_fp8.data = reinterpret_cast<uint8_t*>(a.h16b.data()) + 8;  // inside q, which fused RoPE writes
  EXPECT_EQ(p.validate().message(), overlap("q", p.q, "q_fp8", p.q_fp8, "outputs must not alias each other"));
  p = make_append(a);
  p.q.data = a.h16.data() + 512;  // q over k_pe: q is rotated in place, k_pe read
  EXPECT_EQ(p.validate().message(), overlap("q", p.q, "k_pe", p.k_pe));
  p = make_append(a);
  p.cache.pages.data = a.h16.data();  // the cache over kv_c
  EXPECT_EQ(p.validate().message(), overlap("cache.pages", p.cache.pages, "kv_c", p.kv_c));
  p = make_append(a);
  p.positions = {};  // no fused RoPE: cos_sin is never read, so the cache may lie over it
  p.cos_sin.data = p.cache.pages.data;
  expect_ok(p);
  p = make_append(a);
  p.cache.pages.data = a.i64b.data();  // the cache over positions
  EXPECT_EQ(p.validate().message(), overlap("cache.pages", p.cache.pages, "positions", p.positions));

  // Without fused RoPE q is only read (for q_fp8): it may share memory with other inputs, not with q_fp8.
  p = make_append(a);
  p.positions = {};
  p.cos_sin = {};
  p.q.data = a.h16.data() + 512;  // over k_pe: two inputs
  expect_ok(p);
  p.q_fp8.data = reinterpret_cast<uint8_t*>(a.h16.data() + 512);
  EXPECT_EQ(p.validate().message(), overlap("q_fp8", p.q_fp8, "k_pe", p.k_pe));

  // kv_c and k_pe as column ranges of one [T, d_c + d_r] tensor (vLLM's kv_a output): inputs may overlap.
  p = make_append(a);
  p.kv_c = TensorView::strided(a.h16.data(), DType::kBF16, {3, kSmall.d_c}, {kSmall.d_qk(), 1});
  p.k_pe = TensorView::strided(a.h16.data() + kSmall.d_c, DType::kBF16, {3, kSmall.d_r}, {kSmall.d_qk(), 1});
  expect_ok(p);
}

TEST(AliasValidation, RopeIsInPlaceOverItsOwnTensorOnly) {
  Arena a;
  RopeProblem p = make_rope(a);
  expect_ok(p);  // x is both read and written: in place by definition
  p.x.data = a.f32b.data() + 8;
  EXPECT_EQ(p.validate().message(), overlap("x", p.x, "cos_sin", p.cos_sin));
  p = make_rope(a);
  p.x = TensorView::contiguous(a.i64.data(), DType::kFP32, {2, 3, 4});
  EXPECT_EQ(p.validate().message(), overlap("x", p.x, "positions", p.positions));
}

TEST(AliasValidation, GatherKv) {
  Arena a;
  GatherKvProblem p = make_gather(a);
  p.out.data = a.i32b.data();  // over seq_lens and cu_out
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "seq_lens", p.seq_lens));
  p = make_gather(a);
  p.out.data = a.cache.data() + a.cache.size() - 2;  // out's first element over the cache's last two bytes
  EXPECT_EQ(p.validate().message(), overlap("out", p.out, "cache.pages", p.cache.pages));
  p = make_gather(a);
  std::vector<uint8_t> both(a.cache.size() + 8 * kSmall.d_qk() * 2);
  p.cache.pages.data = both.data();
  p.out.data = both.data() + a.cache.size();  // out starts right after the cache
  expect_ok(p);
}

}  // namespace
}  // namespace mlakit
