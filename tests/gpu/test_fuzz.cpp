// Differential GPU fuzzer (issue 11 item 4): seeded random dense and sparse decode problems (every V3 KV format,
// page sizes, head counts 1..128, s_q 1..8 causal or not, lengths including 0 and shorter than a page, batches,
// top-k and topk_length, sinks, q dtypes, scale on the device or not) and ragged prefill problems (every compiled
// (d_qk, d_v), bf16 and fp16, causal or not, requests without queries or keys, single tokens, Lq = Lk and Lq < Lk,
// padded token rows, strided out heads) through every CUDA path this device runs, each against the CPU reference
// with docs/spec.md section 10's tolerances. A failure names the seed and the
// problem; MLAKIT_FUZZ_SEED=<seed> MLAKIT_FUZZ_CASES=1 replays it alone.
//
// ctest runs MLAKIT_FUZZ_CASES (default 150) cases from MLAKIT_FUZZ_SEED (default 20261124); scripts/gpu-check.sh runs
// thousands. Problem sizes are capped so that the reference takes well under a second per case.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "device_case.h"
#include "hopper_fp8_rule.h"
#include "prefill_gpu.h"
#include "reference/ops.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr int64_t kDimV = 512;
constexpr uint8_t kPoison = 0xFF;
/// Cap on s_q * h_q * (keys attended per request, summed): the reference's work per case.
constexpr int64_t kMaxWork = 400000;
/// Cap on h_q * (query-key pairs, summed) of a prefill case: the same budget at its ~0.3 of decode's work per pair.
constexpr int64_t kMaxPrefillPairs = 1200000;

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::strtoull(v, nullptr, 10) : fallback;
}

KvFormat pick_format(std::mt19937_64& rng) {
  constexpr KvFormat kFormats[] = {KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla};
  return kFormats[rng() % 4];
}
DType pick_q_dtype(std::mt19937_64& rng, KvFormat f) {
  if (f == KvFormat::kBF16) return DType::kBF16;
  if (f == KvFormat::kFP16) return DType::kFP16;
  return rng() % 2 ? DType::kBF16 : DType::kFP16;
}
/// Head counts: the shapes engines shard to half the time, any count in [1, 128] otherwise.
int64_t pick_heads(std::mt19937_64& rng) {
  constexpr int64_t kCommon[] = {1, 3, 8, 16, 32, 63, 64, 127, 128};
  return rng() % 2 ? kCommon[rng() % 9] : int64_t(1 + rng() % 128);
}

std::string describe_dense(const DecodeCaseConfig& c, bool scale_on_device) {
  std::string lens;
  for (int32_t l : c.seq_lens) lens += std::to_string(l) + ",";
  return "dense " + std::string(kv_format_name(c.format)) + " q=" + dtype_name(c.q_dtype) + " h_q=" +
         std::to_string(c.h_q) + " s_q=" + std::to_string(c.s_q) + " causal=" + std::to_string(c.causal) + " P=" +
         std::to_string(c.page_size) + " pad=" + std::to_string(c.page_padding_bytes) + " scale_on_device=" +
         std::to_string(scale_on_device) + " seq_lens=" + lens;
}

std::string describe_sparse(const SparseCaseConfig& c) {
  return "sparse " + std::string(kv_format_name(c.format)) + " q=" + dtype_name(c.q_dtype) + " b=" +
         std::to_string(c.batch) + " h_q=" + std::to_string(c.h_q) + " s_q=" + std::to_string(c.s_q) + " topk=" +
         std::to_string(c.topk) + " P=" + std::to_string(c.page_size) + " pages=" + std::to_string(c.num_pages) +
         " topk_length=" + std::to_string(!c.topk_length.empty()) + " sink=" + std::to_string(!c.attn_sink.empty());
}

/// Runs `p` (device buffers; out and lse at `out`, `lse`) on `be` with a poisoned workspace, then the reference on the
/// host case `c`, and compares out and lse. Returns false when the backend refused by its documented rule.
template <class Problem, class Case, class Reference>
bool run_and_compare(const Backend& be, const Problem& p, Case& c, const void* out, const void* lse,
                     Reference&& reference) {
  const Status sup = be.supports(p);
  if (is_fp8_row_refusal(sup)) return false;
  EXPECT_TRUE(sup.ok()) << sup.to_string();
  if (!sup.ok()) return true;
  const size_t ws_bytes = be.workspace_bytes(p);
  DeviceBuffer ws(ws_bytes);
  EXPECT_EQ(cudaMemset(ws.get(), kPoison, ws_bytes), cudaSuccess);
  const Workspace w{ws.get(), ws_bytes};
  Status st;
  if constexpr (std::is_same_v<Problem, DecodeProblem>) st = be.plan(p, w, nullptr);
  if (st.ok()) st = be.run(p, w, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<uint16_t> got(c.out.size());
  std::vector<float> got_lse(c.lse.size());
  if (!got.empty()) {
    EXPECT_EQ(cudaMemcpy(got.data(), out, got.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  if (!got_lse.empty()) {
    EXPECT_EQ(cudaMemcpy(got_lse.data(), lse, got_lse.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  const Status ref = reference();
  EXPECT_TRUE(ref.ok()) << ref.to_string();
  const DType dt = c.config.q_dtype;
  EXPECT_TRUE(check_out(to_floats(got, dt), c.out_floats(), c.row_vmax(), kDimV, dt));
  EXPECT_TRUE(check_lse(got_lse, c.lse));
  return true;
}

/// Runs and compares one dense case; returns false when the backend refused it by its documented rule.
bool fuzz_dense(std::mt19937_64& rng, const Backend& be, uint64_t seed) {
  DecodeCaseConfig cfg;
  cfg.format = pick_format(rng);
  cfg.q_dtype = pick_q_dtype(rng, cfg.format);
  cfg.h_q = pick_heads(rng);
  cfg.s_q = int64_t(1 + rng() % 8);
  cfg.causal = rng() % 2 == 0;
  constexpr int64_t kPages[] = {1, 16, 32, 64, 128};
  cfg.page_size = kPages[rng() % 5];
  cfg.page_padding_bytes = rng() % 3 == 0 ? 64 : 0;
  const int64_t b = int64_t(1 + rng() % 12);
  cfg.seq_lens.clear();
  for (int64_t i = 0; i < b; ++i) {
    const uint64_t kind = rng() % 4;  // empty or tiny, inside one page, a few pages, long
    const int64_t len = kind == 0 ? int64_t(rng() % 4) : kind == 1 ? int64_t(rng() % (cfg.page_size + 1))
                        : kind == 2 ? int64_t(rng() % 600) : int64_t(rng() % 5000);
    cfg.seq_lens.push_back(int32_t(len));
  }
  int64_t keys = 0;
  for (int32_t l : cfg.seq_lens) keys += l;
  const int64_t work = cfg.s_q * cfg.h_q * keys;
  if (work > kMaxWork) {  // shrink the lengths, keeping their shape
    for (int32_t& l : cfg.seq_lens) l = int32_t(int64_t(l) * kMaxWork / work);
  }
  cfg.seed = seed;
  const bool scale_on_device = rng() % 2 == 0;
  SCOPED_TRACE(describe_dense(cfg, scale_on_device));

  DecodeCase c = DecodeCase::generate(cfg);
  DeviceDecodeCase d;
  d.upload(c, scale_on_device);
  return run_and_compare(be, d.problem, c, d.out.get(), d.lse.get(), [&] { return reference::decode(c.problem()); });
}

/// Runs and compares one sparse case; returns false when the backend refused it by its documented rule.
bool fuzz_sparse(std::mt19937_64& rng, const Backend& be, uint64_t seed) {
  SparseCaseConfig cfg;
  cfg.format = pick_format(rng);
  cfg.q_dtype = pick_q_dtype(rng, cfg.format);
  cfg.h_q = pick_heads(rng);
  cfg.s_q = int64_t(1 + rng() % 4);
  cfg.batch = int64_t(1 + rng() % 8);
  cfg.topk = int64_t(1 + rng() % 700);
  cfg.page_size = int64_t(1 + rng() % 130);  // sparse decode takes any page size
  if (cfg.batch * cfg.s_q * cfg.h_q * cfg.topk > kMaxWork) {
    cfg.topk = std::max<int64_t>(1, kMaxWork / (cfg.batch * cfg.s_q * cfg.h_q));
  }
  cfg.num_pages = (std::max<int64_t>(cfg.topk, 40) + cfg.page_size - 1) / cfg.page_size + 1;
  if (rng() % 2) {
    for (int64_t i = 0; i < cfg.batch; ++i) cfg.topk_length.push_back(int32_t(rng() % (cfg.topk + 1)));
  }
  if (rng() % 2) {
    std::uniform_real_distribution<float> u(-2.0f, 6.0f);
    for (int64_t h = 0; h < cfg.h_q; ++h) cfg.attn_sink.push_back(u(rng));
  }
  cfg.seed = seed;
  SCOPED_TRACE(describe_sparse(cfg));

  SparseCase c = SparseCase::generate(cfg);
  DeviceSparseCase d;
  d.upload(c, /*scale_on_device=*/false);
  return run_and_compare(be, d.problem, c, d.out.get(), d.lse.get(),
                         [&] { return reference::sparse_decode(c.problem()); });
}

/// Runs and compares one ragged prefill case; returns false when the path is not compiled for the case's (d_qk, d_v)
/// and refused it by name.
bool fuzz_prefill(std::mt19937_64& rng, const Backend& be, uint64_t seed) {
  PrefillCaseConfig cfg;
  // DeepSeek's 192/128 two times in three, the other compiled pairs once in six each.
  cfg.geometry = rng() % 2 ? kPrefillGeometries[0] : kPrefillGeometries[rng() % 3];
  cfg.dtype = rng() % 2 ? DType::kBF16 : DType::kFP16;
  cfg.causal = rng() % 2 == 0;
  cfg.h_q = pick_heads(rng);
  const int64_t b = int64_t(1 + rng() % 6);
  for (int64_t i = 0; i < b; ++i) {
    const uint64_t kind = rng() % 5;  // no queries, one token, Lq = Lk, extend, long extend
    const int32_t lq = kind == 0 ? 0 : kind == 1 ? 1 : int32_t(1 + rng() % 300);
    const int32_t extra = kind == 2 ? 0 : kind == 4 ? int32_t(rng() % 2000) : int32_t(rng() % 200);
    cfg.lens.push_back({lq, lq + extra});
  }
  int64_t pairs = 0;
  for (auto [lq, lk] : cfg.lens) pairs += int64_t(lq) * lk;
  if (pairs * cfg.h_q > kMaxPrefillPairs) {  // shrink the lengths, keeping their shape (and Lk >= Lq)
    const double f = std::sqrt(double(kMaxPrefillPairs) / double(pairs * cfg.h_q));
    for (auto& [lq, lk] : cfg.lens) {
      lq = int32_t(lq * f);
      lk = std::max(lq, int32_t(lk * f));
    }
  }
  constexpr int64_t kPadding[] = {0, 8, 24};  // elements after each token's heads (rows stay 16-byte aligned)
  cfg.token_padding = kPadding[rng() % 3];
  // A strided head of out (token rows stay packed, so only one head may have a wider stride without overlap).
  if (cfg.h_q == 1 && rng() % 2 == 0) cfg.out_head_stride = cfg.geometry.d_vh + 8 * int64_t(1 + rng() % 4);
  cfg.seed = seed;
  SCOPED_TRACE("prefill " + describe(cfg));

  PrefillCase c = PrefillCase::generate(cfg);
  std::vector<float> out, lse;
  const Status st = run_prefill_on_gpu(be, c, &out, &lse);
  if (path_lacks(be.name(), cfg.geometry)) {
    EXPECT_TRUE(refused_by_rule(st)) << st.to_string();
    return false;
  }
  if (refused_by_rule(st)) return false;  // the portable kernel at 192 / 128 on a 99 KB device
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (st.ok()) expect_prefill_matches_reference(c, out, lse);
  return true;
}

TEST(DifferentialFuzz, EveryCudaPathMatchesTheReference) {
  std::vector<const Backend*> paths;
  std::string why;
  for (const char* name : {"cuda", "cuda_sm90"}) {
    if (const Backend* be = cuda_backend(&why, name)) paths.push_back(be);
  }
  if (paths.empty()) GTEST_SKIP() << why;
  const uint64_t base = env_or("MLAKIT_FUZZ_SEED", 20261124);
  const uint64_t cases = env_or("MLAKIT_FUZZ_CASES", 150);
  std::map<std::string, int> ran, refused;
  int failed = 0;
  for (uint64_t i = 0; i < cases && failed < 5; ++i) {
    const uint64_t seed = base + i;
    std::mt19937_64 rng(seed);
    const Backend& be = *paths[rng() % paths.size()];
    const uint64_t op = rng() % 10;  // 5 dense, 3 sparse, 2 prefill in 10
    SCOPED_TRACE("MLAKIT_FUZZ_SEED=" + std::to_string(seed) + " MLAKIT_FUZZ_CASES=1 on " + be.name());
    const ::testing::TestResult* result = ::testing::UnitTest::GetInstance()->current_test_info()->result();
    const int parts_before = result->total_part_count();  // failed assertions add parts
    const bool served = op < 5   ? fuzz_dense(rng, be, seed)
                        : op < 8 ? fuzz_sparse(rng, be, seed)
                                 : fuzz_prefill(rng, be, seed);
    const std::string key = be.name() + (op < 5 ? " dense" : op < 8 ? " sparse" : " prefill");
    ++(served ? ran : refused)[key];
    if (result->total_part_count() > parts_before) ++failed;  // stop after 5 failing cases
  }
  for (const auto& [key, n] : ran) std::printf("fuzz: %-18s %5d cases checked, %d refused by a documented rule\n",
                                               key.c_str(), n, refused[key]);
}

}  // namespace
}  // namespace mlakit::test
