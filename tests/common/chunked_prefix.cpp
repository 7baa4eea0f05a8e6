#include "common/chunked_prefix.h"

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <vector>

#include "common/compare.h"
#include "mlakit/numeric.h"

namespace mlakit::test {
namespace {

constexpr int64_t kHeads = 2, kDqk = 192, kDv = 128;

using Request = ChunkedRequest;

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
void prefill(const Runner& run, const std::vector<Request>& reqs, const std::vector<Sequence>& seqs,
             const std::function<int32_t(const Request&)>& k_begin, const std::function<int32_t(const Request&)>& k_end,
             bool causal, std::vector<uint16_t>* out, std::vector<float>* lse) {
  std::vector<uint16_t> q, k, v;
  std::vector<int32_t> cu_q{0}, cu_k{0};
  for (size_t b = 0; b < reqs.size(); ++b) {
    const Request& r = reqs[b];
    q.insert(q.end(), seqs[b].q.begin(), seqs[b].q.end());
    const int32_t lo = k_begin(r), hi = k_end(r);
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
  const Status st = run.prefill(p);
  ASSERT_TRUE(st.ok()) << st.to_string();
}

}  // namespace

void expect_chunked_prefix_matches_unchunked(const std::vector<ChunkedRequest>& reqs, int chunks, uint64_t seed,
                                             const Runner& run) {
  std::mt19937_64 rng(seed);
  std::vector<Sequence> seqs;
  for (const Request& r : reqs) {
    const size_t tokens = size_t(r.prefix + r.fresh);
    seqs.push_back({random_bf16(size_t(r.fresh) * kHeads * kDqk, rng), random_bf16(tokens * kHeads * kDqk, rng),
                    random_bf16(tokens * kHeads * kDv, rng)});
  }
  std::vector<uint16_t> ref_out;
  std::vector<float> ref_lse;
  const auto whole_begin = [](const Request&) { return 0; };
  const auto whole_end = [](const Request& r) { return r.prefix + r.fresh; };
  prefill(run, reqs, seqs, whole_begin, whole_end, true, &ref_out, &ref_lse);

  const int64_t rows = int64_t(ref_lse.size());  // query tokens x heads
  std::vector<uint16_t> parts_out;
  std::vector<float> parts_lse;
  for (int c = 0; c <= chunks; ++c) {  // chunk c of the prefix is [c P / chunks, (c + 1) P / chunks); then the new tokens
    std::vector<uint16_t> out;
    std::vector<float> lse;
    if (c < chunks) {
      const auto begin = [&](const Request& r) { return int32_t(int64_t(c) * r.prefix / chunks); };
      const auto end = [&](const Request& r) { return int32_t(int64_t(c + 1) * r.prefix / chunks); };
      prefill(run, reqs, seqs, begin, end, false, &out, &lse);
    } else {
      const auto begin = [](const Request& r) { return r.prefix; };
      prefill(run, reqs, seqs, begin, whole_end, true, &out, &lse);
    }
    parts_out.insert(parts_out.end(), out.begin(), out.end());
    parts_lse.insert(parts_lse.end(), lse.begin(), lse.end());
  }
  std::vector<uint16_t> out(size_t(rows * kDv), 0xffff);
  std::vector<float> lse(size_t(rows), NAN);
  MergeProblem m;
  m.parts_out = TensorView::contiguous(parts_out.data(), DType::kBF16, {chunks + 1, rows, kDv});
  m.parts_lse = TensorView::contiguous(parts_lse.data(), DType::kFP32, {chunks + 1, rows});
  m.out = TensorView::contiguous(out.data(), DType::kBF16, {rows, kDv});
  m.lse = TensorView::contiguous(lse.data(), DType::kFP32, {rows});
  const Status st = run.merge(m);
  ASSERT_TRUE(st.ok()) << st.to_string();

  const std::vector<float> vmax{1.0f};  // values are uniform in [-1, 1]
  EXPECT_TRUE(check_out(to_floats(out, DType::kBF16), to_floats(ref_out, DType::kBF16), vmax, kDv, DType::kBF16));
  EXPECT_TRUE(check_lse(lse, ref_lse));
}

}  // namespace mlakit::test
