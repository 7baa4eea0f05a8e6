// Chunked prefix, end to end on the reference (docs/spec.md section 3, issue 10 item 2): the new tokens of each
// request attend to every chunk of its cached prefix (causal = false) and to themselves (causal = true, bottom-right),
// and merging the five partial states (docs/spec.md section 6) gives the unchunked causal prefill over prefix + new
// tokens, within docs/spec.md section 10's bf16 tolerance. Ragged: requests of different lengths, one with no new
// token. The partial states are bf16, as an engine's would be.

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "common/compare.h"
#include "mlakit/numeric.h"
#include "mlakit/registry.h"

namespace mlakit {
namespace {

constexpr int64_t kHeads = 2, kDqk = 192, kDv = 128, kChunks = 4;

struct Request {
  int32_t prefix, fresh;  // cached prefix tokens, new tokens (queries)
};

/// Per request: q of its new tokens, k and v of its whole sequence (prefix, then new tokens), bf16 bits.
struct Sequence {
  std::vector<uint16_t> q, k, v;
};

std::vector<uint16_t> random_bf16(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(u(rng));
  return v;
}

/// One ragged prefill call over token ranges [k_begin(b), k_end(b)) of each request's keys; returns out, lse.
void prefill(const std::vector<Request>& reqs, const std::vector<Sequence>& seqs,
             int32_t (*k_begin)(const Request&, int64_t), int32_t (*k_end)(const Request&, int64_t), int64_t chunk,
             bool causal, std::vector<uint16_t>* out, std::vector<float>* lse) {
  std::vector<uint16_t> q, k, v;
  std::vector<int32_t> cu_q{0}, cu_k{0};
  for (size_t b = 0; b < reqs.size(); ++b) {
    const Request& r = reqs[b];
    q.insert(q.end(), seqs[b].q.begin(), seqs[b].q.end());
    const int32_t lo = k_begin(r, chunk), hi = k_end(r, chunk);
    k.insert(k.end(), seqs[b].k.begin() + lo * kHeads * kDqk, seqs[b].k.begin() + hi * kHeads * kDqk);
    v.insert(v.end(), seqs[b].v.begin() + lo * kHeads * kDv, seqs[b].v.begin() + hi * kHeads * kDv);
    cu_q.push_back(cu_q.back() + r.fresh);
    cu_k.push_back(cu_k.back() + hi - lo);
  }
  const int64_t t_q = cu_q.back(), t_k = cu_k.back();
  out->assign(size_t(t_q * kHeads * kDv), 0xffff);
  lse->assign(size_t(t_q * kHeads), NAN);
  PrefillProblem p;
  p.q = TensorView::contiguous(q.data(), DType::kBF16, {t_q, kHeads, kDqk});
  p.k = TensorView::contiguous(k.data(), DType::kBF16, {t_k, kHeads, kDqk});
  p.v = TensorView::contiguous(v.data(), DType::kBF16, {t_k, kHeads, kDv});
  p.cu_seqlens_q = TensorView::contiguous(cu_q.data(), DType::kInt32, {int64_t(cu_q.size())});
  p.cu_seqlens_k = TensorView::contiguous(cu_k.data(), DType::kInt32, {int64_t(cu_k.size())});
  p.out = TensorView::contiguous(out->data(), DType::kBF16, {t_q, kHeads, kDv});
  p.lse = TensorView::contiguous(lse->data(), DType::kFP32, {t_q, kHeads});
  p.softmax_scale = 0.0722f;  // 1 / sqrt(192)
  p.causal = causal;
  const Registry registry = make_default_registry();
  const Status st = registry.get("reference")->run(p, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
}

// Chunk c of the prefix: [c P / 4, (c + 1) P / 4); the new tokens: [P, P + fresh); the whole sequence: [0, P + fresh).
int32_t chunk_begin(const Request& r, int64_t c) { return int32_t(c * r.prefix / kChunks); }
int32_t chunk_end(const Request& r, int64_t c) { return int32_t((c + 1) * r.prefix / kChunks); }
int32_t fresh_begin(const Request& r, int64_t) { return r.prefix; }
int32_t seq_begin(const Request&, int64_t) { return 0; }
int32_t seq_end(const Request& r, int64_t) { return r.prefix + r.fresh; }

TEST(ChunkedPrefix, FourPrefixChunksPlusCausalNewTokensMergeToTheUnchunkedPrefill) {
  // Every chunk holds at least as many keys as its request has new tokens (docs/spec.md section 3: Lk >= Lq).
  const std::vector<Request> reqs = {{1024, 48}, {704, 17}, {3, 0}};
  std::mt19937_64 rng(5);
  std::vector<Sequence> seqs;
  for (const Request& r : reqs) {
    const size_t tokens = size_t(r.prefix + r.fresh);
    seqs.push_back({random_bf16(size_t(r.fresh) * kHeads * kDqk, rng), random_bf16(tokens * kHeads * kDqk, rng),
                    random_bf16(tokens * kHeads * kDv, rng)});
  }
  std::vector<uint16_t> ref_out;
  std::vector<float> ref_lse;
  prefill(reqs, seqs, seq_begin, seq_end, 0, true, &ref_out, &ref_lse);

  const int64_t rows = int64_t(ref_lse.size());  // query tokens x heads
  std::vector<uint16_t> parts_out;
  std::vector<float> parts_lse;
  for (int64_t c = 0; c <= kChunks; ++c) {  // chunks 0..3 of the prefix, then the new tokens
    std::vector<uint16_t> out;
    std::vector<float> lse;
    if (c < kChunks) {
      prefill(reqs, seqs, chunk_begin, chunk_end, c, false, &out, &lse);
    } else {
      prefill(reqs, seqs, fresh_begin, seq_end, 0, true, &out, &lse);
    }
    parts_out.insert(parts_out.end(), out.begin(), out.end());
    parts_lse.insert(parts_lse.end(), lse.begin(), lse.end());
  }
  std::vector<uint16_t> out(size_t(rows * kDv), 0xffff);
  std::vector<float> lse(size_t(rows), NAN);
  MergeProblem m;
  m.parts_out = TensorView::contiguous(parts_out.data(), DType::kBF16, {kChunks + 1, rows, kDv});
  m.parts_lse = TensorView::contiguous(parts_lse.data(), DType::kFP32, {kChunks + 1, rows});
  m.out = TensorView::contiguous(out.data(), DType::kBF16, {rows, kDv});
  m.lse = TensorView::contiguous(lse.data(), DType::kFP32, {rows});
  const Registry registry = make_default_registry();
  const Status st = registry.get("reference")->run(m, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();

  const std::vector<float> vmax{1.0f};  // values are uniform in [-1, 1]
  EXPECT_TRUE(test::check_out(test::to_floats(out, DType::kBF16), test::to_floats(ref_out, DType::kBF16), vmax, kDv,
                              DType::kBF16));
  EXPECT_TRUE(test::check_lse(lse, ref_lse));
}

}  // namespace
}  // namespace mlakit
