// Both CUDA prefill paths (issue 10, docs/spec.md section 3: "cuda", the portable kernel, and "cuda_sm90", the
// Hopper one) against the CPU reference with the tolerances of docs/spec.md section 10: ragged batches with requests of no queries and no keys, Lq == Lk and
// Lq < Lk (extend), single tokens, odd head counts, every compiled (d_qk, d_v), causal and not, strided token rows
// with NaN-poisoned padding, NaN after the last key (zero-filled by the kernel, never read), poisoned outputs; and
// cu_seqlens on the device that validation cannot check (Lk < Lq, garbage).

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/chunked_prefix.h"
#include "common/compare.h"
#include "common/decode_case.h"
#include "common/prefill_case.h"
#include "mlakit/backend.h"
#include "mlakit/registry.h"
#include "reference/ops.h"
#include "prefill_gpu.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

/// Runs case `c` on CUDA backend `be` (named `backend`) (prefill_gpu.h); out and lse come back as floats. A path not
/// compiled for the case's dims must refuse it by name, and the test is then skipped.
void run_on_gpu(const Backend& be, const std::string& backend, PrefillCase& c, std::vector<float>* out,
                std::vector<float>* lse, DeviceLens lens = {}) {
  const Status st = run_prefill_on_gpu(be, c, out, lse, lens);
  if (path_lacks(backend, c.cfg.geometry)) {
    EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
    EXPECT_NE(st.message().find("(d_qk, d_v)="), std::string::npos) << st.to_string();
    GTEST_SKIP() << "not compiled on " << backend << ": " << st.message();
  }
  if (refused_by_rule(st)) GTEST_SKIP() << backend << " on this device: " << st.message();  // a 99 KB device
  ASSERT_TRUE(st.ok()) << st.to_string();
}

/// Runs the case on CUDA backend `backend` and on the reference; compares out (every element) and lse.
void expect_matches_reference(const PrefillCaseConfig& cfg, const std::string& backend = "cuda") {
  SCOPED_TRACE(describe(cfg) + " backend=" + backend);
  std::string why;
  const Backend* cuda = cuda_backend(&why, backend);
  if (cuda == nullptr) GTEST_SKIP() << why;
  PrefillCase c = PrefillCase::generate(cfg);
  std::vector<float> out, lse;
  run_on_gpu(*cuda, backend, c, &out, &lse);
  if (::testing::Test::IsSkipped() || ::testing::Test::HasFatalFailure()) return;
  expect_prefill_matches_reference(c, out, lse);
}

using Params = std::tuple<std::string /*backend*/, DType, bool /*causal*/, int64_t /*h_q*/, int /*geometry*/>;
class CudaPrefill : public ::testing::TestWithParam<Params> {};

TEST_P(CudaPrefill, RaggedBatchMatchesReference) {
  const auto [backend, dtype, causal, h_q, geometry] = GetParam();
  PrefillCaseConfig cfg;
  cfg.dtype = dtype;
  cfg.causal = causal;
  cfg.h_q = h_q;
  cfg.geometry = kPrefillGeometries[geometry];
  // No queries (with and without keys), single tokens, Lq == Lk across tile edges, Lq < Lk (extend), several
  // 64-row blocks per request, a last key tile that is partial.
  cfg.lens = {{0, 0}, {0, 4}, {1, 1}, {3, 10}, {7, 7}, {64, 64}, {65, 130}, {1, 33}, {200, 200}, {130, 1000}, {5, 40}};
  cfg.seed = 900 + uint64_t(dtype) * 10 + uint64_t(h_q) + (causal ? 5 : 0) + uint64_t(geometry) * 100;
  expect_matches_reference(cfg, backend);
}

INSTANTIATE_TEST_SUITE_P(Ragged, CudaPrefill,
                         ::testing::Combine(::testing::Values(std::string("cuda"), std::string("cuda_sm90")),
                                            ::testing::Values(DType::kBF16, DType::kFP16), ::testing::Bool(),
                                            ::testing::Values(int64_t{1}, int64_t{3}), ::testing::Values(0, 1, 2)));

class CudaPrefillLong : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaPrefillLong, OneRequestOf2048TokensCausal) {
  PrefillCaseConfig cfg;
  cfg.h_q = 2;
  cfg.causal = true;
  cfg.lens = {{2048, 2048}};
  cfg.seed = 77;
  expect_matches_reference(cfg, GetParam());
}

TEST_P(CudaPrefillLong, ExtendOver3000CachedTokens) {
  PrefillCaseConfig cfg;
  cfg.h_q = 1;
  cfg.causal = true;
  cfg.lens = {{300, 3300}, {1, 3000}, {64, 64}};
  cfg.seed = 78;
  expect_matches_reference(cfg, GetParam());
}

TEST_P(CudaPrefillLong, ManyShortRequestsNonCausal) {
  PrefillCaseConfig cfg;
  cfg.h_q = 5;
  cfg.lens.assign(40, {33, 97});
  cfg.lens.push_back({0, 0});
  cfg.lens.push_back({129, 129});
  cfg.seed = 79;
  expect_matches_reference(cfg, GetParam());
}

// More requests than one search round covers (block_of_slot tests 64 candidate requests per round): 70 requests take
// two rounds, 4,500 three, with empty and single-token requests mixed in so that many slots of a round fail.
TEST_P(CudaPrefillLong, ManyRequestsTakeSeveralSearchRounds) {
  for (int batch : {70, 4500}) {
    PrefillCaseConfig cfg;
    cfg.h_q = 1;
    cfg.causal = batch == 70;
    for (int r = 0; r < batch; ++r) {
      const int lq = (r * 7) % 5 == 0 ? 0 : (r * 13) % (batch == 70 ? 150 : 3);
      cfg.lens.push_back({lq, lq + (r % 4) * 9});
    }
    cfg.seed = 82 + uint64_t(batch);
    expect_matches_reference(cfg, GetParam());
  }
}

// The Hopper kernel's persistent launch (requests averaging at most 1,024 keys and more (slot, head) items than SMs:
// sm90/kernel.cuh): 8 heads over 60 requests, so each CTA of a 132-SM GPU walks about seven items, among them slots
// with no rows (empty requests, the last slot of a request whose length is a multiple of 128), blocks whose last key
// tile is partial (copied row by row, its stage later refilled by TMA for another item) and whole ones, causal and
// not, so the K/V ring, the Q hand-over and their barrier phases run on from item to item; then, causal, fp16, the
// (128, 128) kernel, and one head over 150 requests with an odd out head stride (never stepped at one head, but it
// makes out's rows count as not 16-byte aligned: the epilogue's direct stores). The portable path takes one CTA per
// block.
TEST_P(CudaPrefillLong, ManyShortRequestsPerSm) {
  const int lqs[] = {0, 1, 5, 64, 127, 128, 129, 200, 256, 300};
  const int extra_keys[] = {0, 3, 70, 129};
  struct Variant {
    bool causal;
    DType dtype;
    Geometry geometry;
    int64_t h_q, requests, out_head_stride;
  };
  const Variant variants[] = {{true, DType::kBF16, {192, 128}, 8, 60, 0},  {false, DType::kBF16, {192, 128}, 8, 60, 0},
                               {true, DType::kFP16, {192, 128}, 8, 60, 0},  {true, DType::kBF16, {128, 128}, 8, 60, 0},
                               {true, DType::kBF16, {192, 128}, 1, 150, 129}};
  for (const Variant& v : variants) {
    PrefillCaseConfig cfg;
    cfg.h_q = v.h_q;
    cfg.causal = v.causal;
    cfg.dtype = v.dtype;
    cfg.geometry = v.geometry;
    cfg.out_head_stride = v.out_head_stride;
    for (int r = 0; r < v.requests; ++r) {
      const int lq = lqs[(r * 7) % 10];
      cfg.lens.push_back({lq, lq + extra_keys[r % 4]});
    }
    cfg.seed = 95 + (v.causal ? 1 : 0) + uint64_t(v.dtype) * 3 + uint64_t(v.geometry.d_qk) + uint64_t(v.h_q);
    expect_matches_reference(cfg, GetParam());
    if (HasFatalFailure() || IsSkipped()) return;
  }
}

// 64 requests fill one search round exactly (block_of_slot tests 64 candidates per round): the last request is the
// round's last candidate, the one whose next cu_seqlens entries no lane of the round holds, and every request must
// still find its own rows and keys.
TEST_P(CudaPrefillLong, SixtyFourRequestsFillOneSearchRound) {
  PrefillCaseConfig cfg;
  cfg.h_q = 2;
  cfg.causal = true;
  for (int r = 0; r < 64; ++r) {
    const int lq = 1 + (r * 37) % 150;
    cfg.lens.push_back({lq, lq + r % 3});
  }
  cfg.seed = 91;
  expect_matches_reference(cfg, GetParam());
}

// One head, so out's head stride multiplies nothing and may be odd: the rows are then not 16-byte aligned and the
// Hopper epilogue must take its 4-byte path (out_rows_aligned) instead of the 16-byte copies through shared memory.
TEST_P(CudaPrefillLong, OneHeadWithAnOddOutHeadStride) {
  for (bool causal : {false, true}) {
    PrefillCaseConfig cfg;
    cfg.h_q = 1;
    cfg.out_head_stride = 129;
    cfg.causal = causal;
    cfg.lens = {{0, 0}, {1, 33}, {65, 130}, {200, 200}};
    cfg.seed = 80 + (causal ? 1 : 0);
    expect_matches_reference(cfg, GetParam());
  }
}

// A dimension of one element never steps, so validation ignores its stride, and so must the Hopper path's TMA
// descriptors (cuTensorMapEncodeTiled refuses a stride that is not a multiple of 16 bytes): one head with an odd head
// stride on q, k and v, and a batch of one token per side with an odd token stride.
TEST_P(CudaPrefillLong, StridesOfOneElementDimensionsAreNotUsed) {
  PrefillCaseConfig one_head;
  one_head.h_q = 1;
  one_head.in_head_stride = 193;
  one_head.lens = {{0, 0}, {1, 33}, {65, 130}, {200, 200}};
  one_head.seed = 83;
  expect_matches_reference(one_head, GetParam());
  for (bool causal : {false, true}) {
    PrefillCaseConfig one_token;
    one_token.h_q = 3;
    one_token.token_padding = 3;  // token stride 3 * 192 + 3 elements (q, k), 3 * 128 + 3 (v)
    one_token.causal = causal;
    one_token.lens = {{1, 1}};
    one_token.seed = 84 + (causal ? 1 : 0);
    expect_matches_reference(one_token, GetParam());
  }
}

// Issue 10 item 4: one causal request of 65,536 tokens (Lq = Lk, one head, 192/128), too long for the reference in a
// test's time, so 24 query rows spread over it (the first, the last, both sides of tile edges, and 18 at random) are
// checked against a float64 statement of the attention over the keys each sees (row t: keys 0..t), with the
// tolerances of docs/spec.md section 10; every row of out and lse must have been written (the outputs start poisoned).
TEST_P(CudaPrefillLong, OneRequestOf64KTokensOnSampledRows) {
  const std::string backend = GetParam();
  std::string why;
  const Backend* cuda = cuda_backend(&why, backend);
  if (cuda == nullptr) GTEST_SKIP() << why;
  PrefillCaseConfig cfg;
  cfg.h_q = 1;
  cfg.causal = true;
  cfg.lens = {{65536, 65536}};
  cfg.seed = 86;
  PrefillCase c = PrefillCase::generate(cfg);
  std::vector<float> out, lse;
  run_on_gpu(*cuda, backend, c, &out, &lse);
  if (IsSkipped() || HasFatalFailure()) return;

  const int64_t n = 65536, d_qk = cfg.geometry.d_qk, d_v = cfg.geometry.d_vh;
  std::vector<int64_t> rows = {0, 1, 63, 64, 127, 128, 32767, 32768, n - 65, n - 64, n - 2, n - 1};
  std::mt19937_64 rng(87);
  std::uniform_int_distribution<int64_t> pick(0, n - 1);
  while (rows.size() < 24) rows.push_back(pick(rng));
  std::vector<float> got_out, want_out, got_lse, want_lse;
  for (const int64_t t : rows) {
    std::vector<double> s(size_t(t + 1));
    double m = -INFINITY;
    for (int64_t j = 0; j <= t; ++j) {
      double dot = 0;
      for (int64_t e = 0; e < d_qk; ++e) dot += c.value(c.q, t, 0, d_qk, e) * c.value(c.k, j, 0, d_qk, e);
      s[size_t(j)] = double(kDeepSeekSoftmaxScale) * dot;
      m = std::max(m, s[size_t(j)]);
    }
    double l = 0;
    std::vector<double> o(size_t(d_v), 0.0);
    for (int64_t j = 0; j <= t; ++j) {
      const double w = std::exp(s[size_t(j)] - m);
      l += w;
      for (int64_t e = 0; e < d_v; ++e) o[size_t(e)] += w * c.value(c.v, j, 0, d_v, e);
    }
    for (int64_t e = 0; e < d_v; ++e) {
      got_out.push_back(out[size_t(t * d_v + e)]);
      want_out.push_back(float(o[size_t(e)] / l));
    }
    got_lse.push_back(lse[size_t(t)]);
    want_lse.push_back(float(m + std::log(l)));
  }
  const std::vector<float> row_vmax{v_max(c)};
  EXPECT_TRUE(check_out(got_out, want_out, row_vmax, d_v, cfg.dtype, "out (sampled rows)"));
  EXPECT_TRUE(check_lse(got_lse, want_lse, "lse (sampled rows)"));
  int64_t unwritten = 0;  // every row: a poisoned (NaN) value left means a row the kernel never wrote
  for (float x : out) unwritten += std::isnan(x) ? 1 : 0;
  for (float x : lse) unwritten += std::isnan(x) ? 1 : 0;
  EXPECT_EQ(unwritten, 0);
}

/// Tokens [from, from + n) of `c`'s q or k (d = d_qk) or v (d = d_vh) buffer, padding included.
std::vector<uint16_t> tokens_of(const PrefillCase& c, const std::vector<uint16_t>& bits, int64_t d, int64_t from,
                                int64_t n) {
  const int64_t stride = c.token_stride(d);
  return {bits.begin() + from * stride, bits.begin() + (from + n) * stride};
}

// cu_seqlens live on the device, where validation cannot see a request with fewer keys than queries (docs/spec.md
// section 3 asks Lk_b >= Lq_b; the CPU path refuses it by name). The kernels then apply the rule as written: a causal
// row i sees keys j <= i + Lk_b - Lq_b, none while that is negative (out 0, lse -inf), a non-causal row all Lk_b keys;
// nothing past the request's keys is read (k and v hold its other 60 keys, then NaN). Request 1 of {(30, 50),
// (100, 100)} gets 40 keys, then none, on the device; the expectation is the reference over valid requests built from
// the same tokens: causal, its last 40 rows as one request of (40, 40); non-causal, its rows in requests of at most 40
// over the same 40 keys.
TEST_P(CudaPrefillLong, DeviceLengthsWithFewerKeysThanQueries) {
  const std::string backend = GetParam();
  std::string why;
  const Backend* cuda = cuda_backend(&why, backend);
  if (cuda == nullptr) GTEST_SKIP() << why;
  for (const bool causal : {true, false}) {
    for (const int32_t keys : {40, 0}) {
      PrefillCaseConfig cfg;
      cfg.h_q = 3;
      cfg.causal = causal;
      cfg.lens = {{30, 50}, {100, 100}};
      cfg.seed = 88 + (causal ? 2 : 0) + (keys > 0 ? 1 : 0);
      SCOPED_TRACE(describe(cfg) + " backend=" + backend + " device Lk[1]=" + std::to_string(keys));
      PrefillCase c = PrefillCase::generate(cfg);
      const std::vector<int32_t> cu_k = {0, 50, 50 + keys};
      std::vector<float> out, lse;
      run_on_gpu(*cuda, backend, c, &out, &lse, DeviceLens{nullptr, &cu_k});
      if (IsSkipped() || HasFatalFailure()) return;

      const int64_t h = cfg.h_q, d_qk = cfg.geometry.d_qk, d_v = cfg.geometry.d_vh;
      ASSERT_TRUE(reference::prefill(c.problem()).ok());  // request 0 as the case has it
      std::vector<float> want = to_floats(c.out, cfg.dtype), want_lse = c.lse;
      std::fill(want.begin() + 30 * h * d_v, want.end(), 0.0f);  // request 1: rows that see no key
      std::fill(want_lse.begin() + 30 * h, want_lse.end(), -INFINITY);
      if (keys > 0) {
        const int64_t first = causal ? 100 - keys : 0;  // request 1's first row that sees a key
        PrefillCaseConfig e = cfg;
        e.lens.clear();
        for (int64_t r = first; r < 100; r += keys) e.lens.push_back({int32_t(std::min<int64_t>(keys, 100 - r)), keys});
        PrefillCase ec = PrefillCase::generate(e);
        std::vector<uint16_t> q = tokens_of(c, c.q, d_qk, 30 + first, 100 - first), k, v;
        for (size_t i = 0; i < e.lens.size(); ++i) {
          const std::vector<uint16_t> ki = tokens_of(c, c.k, d_qk, 50, keys), vi = tokens_of(c, c.v, d_v, 50, keys);
          k.insert(k.end(), ki.begin(), ki.end());
          v.insert(v.end(), vi.begin(), vi.end());
        }
        ASSERT_EQ(q.size(), ec.q.size());
        ASSERT_EQ(k.size(), ec.k.size());
        ASSERT_EQ(v.size(), ec.v.size());
        ec.q = q, ec.k = k, ec.v = v;
        ASSERT_TRUE(reference::prefill(ec.problem()).ok());
        const std::vector<float> rows = to_floats(ec.out, cfg.dtype);
        std::copy(rows.begin(), rows.end(), want.begin() + (30 + first) * h * d_v);
        std::copy(ec.lse.begin(), ec.lse.end(), want_lse.begin() + (30 + first) * h);
      }
      const std::vector<float> row_vmax{v_max(c)};
      EXPECT_TRUE(check_out(out, want, row_vmax, d_v, cfg.dtype));
      EXPECT_TRUE(check_lse(lse, want_lse));
    }
  }
}

// Any cu_seqlens contents keep every access in bounds (docs/design.md, "Prefill on the GPU": entries clamped to
// [0, T], the request search confined to [0, b)): decreasing, negative and past-the-end entries on the device. What
// the rows then get is not specified; the call must succeed and no kernel may fault; an access past a buffer's end that does
// not fault passes here, so scripts/gpu-check.sh also runs this test under compute-sanitizer memcheck.
TEST_P(CudaPrefillLong, GarbageDeviceLengthsStayInBounds) {
  const std::string backend = GetParam();
  std::string why;
  const Backend* cuda = cuda_backend(&why, backend);
  if (cuda == nullptr) GTEST_SKIP() << why;
  for (const bool causal : {true, false}) {
    PrefillCaseConfig cfg;
    cfg.h_q = 2;
    cfg.causal = causal;
    cfg.lens = {{30, 50}, {100, 100}, {7, 9}};
    cfg.seed = 92 + (causal ? 1 : 0);
    SCOPED_TRACE(describe(cfg) + " backend=" + backend);
    PrefillCase c = PrefillCase::generate(cfg);
    const std::vector<int32_t> cu_q = {5, 120, -5, 1 << 30}, cu_k = {0, 1000000, 20, -3};
    std::vector<float> out, lse;
    run_on_gpu(*cuda, backend, c, &out, &lse, DeviceLens{&cu_q, &cu_k});
  }
}

INSTANTIATE_TEST_SUITE_P(Paths, CudaPrefillLong, ::testing::Values(std::string("cuda"), std::string("cuda_sm90")));

/// Chunked prefix (issue 10 item 2) on the GPU: a 32K prefix in four chunks, ragged with two more requests; every
/// prefill on `backend`, the merge on the cuda backend, compared with the unchunked prefill on `backend`.
TEST_P(CudaPrefillLong, ChunkedPrefixOf32KMatchesTheUnchunkedPrefill) {
  std::string why;
  const Backend* be = cuda_backend(&why, GetParam());
  const Backend* merger = cuda_backend(&why);
  if (be == nullptr || merger == nullptr) GTEST_SKIP() << why;
  const Runner run{[&](const PrefillProblem& host) {
                     OnDevice d;
                     PrefillProblem p = host;
                     p.q = d.put(host.q), p.k = d.put(host.k), p.v = d.put(host.v), p.out = d.put(host.out);
                     p.lse = d.put(host.lse);
                     p.cu_seqlens_q = d.put(host.cu_seqlens_q), p.cu_seqlens_k = d.put(host.cu_seqlens_k);
                     MLAKIT_TRY(be->run(p, Stream{}));
                     if (cudaDeviceSynchronize() != cudaSuccess) return Status::cuda_error("prefill failed");
                     OnDevice::get(host.out, p.out);
                     OnDevice::get(host.lse, p.lse);
                     return Status{};
                   },
                   [&](const MergeProblem& host) {
                     OnDevice d;
                     MergeProblem m = host;
                     m.parts_out = d.put(host.parts_out), m.parts_lse = d.put(host.parts_lse);
                     m.out = d.put(host.out), m.lse = d.put(host.lse);
                     MLAKIT_TRY(merger->run(m, Stream{}));
                     if (cudaDeviceSynchronize() != cudaSuccess) return Status::cuda_error("merge failed");
                     OnDevice::get(host.out, m.out);
                     OnDevice::get(host.lse, m.lse);
                     return Status{};
                   }};
  expect_chunked_prefix_matches_unchunked({{32768, 300}, {704, 17}, {3, 0}}, 4, 31, run);
}

TEST(CudaPrefillSupports, NamesTheUncompiledHeadDims) {
  std::string why;
  const Backend* cuda = cuda_backend(&why);
  if (cuda == nullptr) GTEST_SKIP() << why;
  PrefillCaseConfig cfg;
  cfg.geometry = {96, 64};
  cfg.lens = {{4, 4}};
  PrefillCase c = PrefillCase::generate(cfg);
  const PrefillProblem host = c.problem();
  OnDevice d;
  PrefillProblem p = host;
  p.q = d.put(host.q), p.k = d.put(host.k), p.v = d.put(host.v), p.out = d.put(host.out);
  p.cu_seqlens_q = d.put(host.cu_seqlens_q), p.cu_seqlens_k = d.put(host.cu_seqlens_k);
  p.lse = TensorView{};
  const Status st = cuda->supports(p);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("(d_qk, d_v)=(96, 64)"), std::string::npos) << st.to_string();
}

}  // namespace
}  // namespace mlakit::test
