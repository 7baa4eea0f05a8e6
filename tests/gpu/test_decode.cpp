// Every CUDA dense decode path (the portable "cuda", issue 3; the Hopper "cuda_sm90", issue 8) against the
// CPU reference (docs/spec.md sections 1, 9 and 10): every format x page size x head count x s_q, random lengths
// including 0 and L < s_q, NaN-poisoned unused pages and page tails, poisoned outputs and workspace, plus
// batch 4096, many requests per CTA, long requests, a cache past 2^31 elements, CUDA-graph replay and the
// golden FlashMLA cases. A path the device cannot run, or a format a path does not implement yet, is
// skipped with its reason (gtest prints it).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "common/npy.h"
#include "cuda/decode/sm80/host_sm80.h"
#include "device_case.h"
#include "hopper_fp8_rule.h"
#include "mlakit/registry.h"
#include "reference/ops.h"

namespace mlakit::test {
namespace {

constexpr uint8_t kPoison = 0xFF;
constexpr int64_t kDimC = 512;
constexpr int64_t kDimQK = 576;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

bool has_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/// The CUDA decode paths every test runs against.
const std::vector<std::string> kCudaDecodeBackends = {"cuda", "cuda_sm90"};

const Backend& backend_named(const std::string& name) {
  static const Registry registry = make_default_registry();
  const Backend* b = registry.get(name);
  if (b == nullptr) std::abort();  // a name of kCudaDecodeBackends that the build does not register
  return *b;
}

/// Skips the calling test when the backend cannot run on this device (no GPU, or not a Hopper GPU).
#define SKIP_UNLESS_AVAILABLE(be)                                                   \
  do {                                                                              \
    if (!has_gpu()) GTEST_SKIP() << "no CUDA device";                               \
    const Status avail_ = (be).available();                                         \
    if (!avail_.ok()) GTEST_SKIP() << (be).name() << ": " << avail_.message();      \
  } while (0)

/// out and lse on the device against the reference values that `c` holds (after reference::decode of its problem).
void expect_outputs_match(const DeviceDecodeCase& d, const DecodeCase& c) {
  const DType dtype = c.config.q_dtype;
  EXPECT_TRUE(check_out(to_floats(d.out_bits(c), dtype), c.out_floats(), c.row_vmax(), kDimC, dtype));
  if (!c.lse.empty()) {
    EXPECT_TRUE(check_lse(d.lse_values(c), c.lse));
  }
}

/// Runs plan + run on the device, copies out/lse back and compares with the reference on the host. `declined`: when
/// given, a call the backend declines by its documented fp8 row rule sets it and returns (the caller goes on to its
/// next shape); when null, such a call skips the test.
void run_and_check(DecodeCase& c, bool scale_on_device, const Backend& be, bool* declined = nullptr) {
  SCOPED_TRACE("b=" + std::to_string(c.batch) + " s_q=" + std::to_string(c.config.s_q) +
               " h_q=" + std::to_string(c.config.h_q) + " P=" + std::to_string(c.config.page_size) +
               " format=" + kv_format_name(c.config.format) + " causal=" + std::to_string(c.config.causal) +
               " seed=" + std::to_string(c.config.seed));
  DeviceDecodeCase d;
  d.upload(c, scale_on_device);
  const Status sup = be.supports(d.problem);
  // The one refusal that skips (hopper_fp8_rule.h; DecodeSelection checks the rule); any other refusal, of any
  // format, fails the test.
  if (is_fp8_row_refusal(sup)) {
    if (declined != nullptr) {
      *declined = true;
      return;
    }
    GTEST_SKIP() << be.name() << ": " << sup.message();
  }
  ASSERT_TRUE(sup.ok()) << sup.to_string();
  const size_t ws_bytes = be.workspace_bytes(d.problem);
  ASSERT_GT(ws_bytes, 0u);
  d.ws.allocate(ws_bytes);
  CUDA_OK(cudaMemset(d.ws.get(), kPoison, ws_bytes));  // the caller need not zero it
  const Workspace ws{d.ws.get(), ws_bytes};
  Status st = be.plan(d.problem, ws, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = be.run(d.problem, ws, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CUDA_OK(cudaDeviceSynchronize());

  // The reference reads the scale through a pointer, as the device does, so that a scale validation cannot see (0,
  // negative: only kv_scale_value is checked) has a reference too.
  DecodeBuffers host = c.host_buffers();
  const float scale = c.config.kv_scale;
  host.kv_scale = &scale;
  const Status ref = reference::decode(c.problem(host, Device::cpu()));
  ASSERT_TRUE(ref.ok()) << ref.to_string();
  expect_outputs_match(d, c);
}

/// Random lengths: empty slots, shorter than s_q, inside one tile, across pages and tiles.
std::vector<int32_t> random_lengths(std::mt19937_64& rng, int n, int max_len) {
  std::vector<int32_t> lens(n);
  std::uniform_int_distribution<int32_t> dist(1, max_len);
  for (int i = 0; i < n; ++i) lens[i] = dist(rng);
  lens[0] = 0;
  if (n > 2) lens[1] = 1;
  std::shuffle(lens.begin(), lens.end(), rng);
  return lens;
}

DType q_dtype_for(KvFormat f, uint64_t seed) {
  if (f == KvFormat::kBF16) return DType::kBF16;
  if (f == KvFormat::kFP16) return DType::kFP16;
  return seed % 2 == 0 ? DType::kBF16 : DType::kFP16;  // fp8 caches take either q dtype
}

// ---- the matrix: format x page size x h_q, each over s_q in {1, 2, 4, 8} causal and not ----
using MatrixParam = std::tuple<std::string, KvFormat, int64_t, int64_t>;

class DecodeMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(DecodeMatrix, MatchesReference) {
  const auto [backend, format, page_size, h_q] = GetParam();
  const Backend& be = backend_named(backend);
  SKIP_UNLESS_AVAILABLE(be);
  uint64_t seed = 1000 + uint64_t(page_size) * 131 + uint64_t(h_q) * 7 + uint64_t(format) * 100003;
  int ran = 0;
  for (int64_t s_q : {1, 2, 4, 8}) {
    for (bool causal : {false, true}) {
      if (s_q == 1 && causal) continue;
      std::mt19937_64 rng(seed);
      DecodeCaseConfig cfg;
      cfg.seq_lens = random_lengths(rng, 4, 700);
      cfg.s_q = s_q;
      cfg.h_q = h_q;
      cfg.page_size = page_size;
      cfg.format = format;
      cfg.q_dtype = q_dtype_for(format, seed);
      cfg.causal = causal;
      cfg.seed = seed++;
      DecodeCase c = DecodeCase::generate(cfg);
      bool declined = false;
      run_and_check(c, /*scale_on_device=*/seed % 2 == 0, be, &declined);
      if (HasFatalFailure()) return;
      ran += declined ? 0 : 1;  // a shape declined by the fp8 row rule: the next s_q may have enough rows
    }
  }
  if (ran == 0) GTEST_SKIP() << backend << " declines every shape of this case (fp8 with <= 16 query rows)";
}

std::string matrix_name(const ::testing::TestParamInfo<MatrixParam>& info) {
  const auto [b, f, p, h] = info.param;
  return b + "_" + kv_format_name(f) + "_P" + std::to_string(p) + "_h" + std::to_string(h);
}

INSTANTIATE_TEST_SUITE_P(Cuda, DecodeMatrix,
                         ::testing::Combine(::testing::ValuesIn(kCudaDecodeBackends),
                                            ::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla),
                                            ::testing::Values(int64_t(1), int64_t(16), int64_t(32), int64_t(64),
                                                              int64_t(128)),
                                            ::testing::Values(int64_t(1), int64_t(3), int64_t(9), int64_t(16),
                                                              int64_t(63), int64_t(64), int64_t(126), int64_t(128))),
                         matrix_name);

// ---- FlashInfer's layout (docs/spec.md sections 1 and 4): a split cache and a flat block table with its indptr ----
using FormsParam = std::tuple<std::string, KvFormat, int64_t>;
class DecodeForms : public ::testing::TestWithParam<FormsParam> {};

TEST_P(DecodeForms, SplitCacheAndFlatTableMatchReference) {
  const auto [backend, format, page_size] = GetParam();
  const Backend& be = backend_named(backend);
  SKIP_UNLESS_AVAILABLE(be);
  uint64_t seed = 7000 + uint64_t(page_size) * 13 + uint64_t(format) * 1009;
  struct Shape {
    int64_t h_q, s_q;
    bool causal;
  };
  for (const Shape sh : {Shape{16, 1, false}, Shape{7, 4, true}, Shape{128, 2, true}}) {
    for (const auto& [split, flat] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, true}}) {
      if (split && format == KvFormat::kFP8DsMla) continue;  // its rows hold scales: no split form (spec section 4)
      SCOPED_TRACE(std::string(split ? "split cache" : "joined cache") + (flat ? ", flat table" : ", 2-D table"));
      std::mt19937_64 rng(seed);
      DecodeCaseConfig cfg;
      cfg.seq_lens = random_lengths(rng, 5, 900);
      cfg.h_q = sh.h_q;
      cfg.s_q = sh.s_q;
      cfg.causal = sh.causal;
      cfg.page_size = page_size;
      cfg.format = format;
      // One token at 16 heads with an fp8 cache and bf16 q is the few-row kernel's call on `cuda` (joined cache).
      const bool fp8 = format == KvFormat::kFP8E4M3 || format == KvFormat::kFP8DsMla;
      cfg.q_dtype = fp8 && sh.s_q == 1 ? DType::kBF16 : q_dtype_for(format, seed);
      cfg.seed = seed++;
      DecodeCase c = test::split_case(DecodeCase::generate(cfg), split, flat);
      if (split && backend == "cuda_sm90") {  // the Hopper path reads each row from one tensor: refused by name
        DeviceDecodeCase d;
        d.upload(c, true);
        const Status st = be.supports(d.problem);
        EXPECT_EQ(st.code(), StatusCode::kNotSupported);
        EXPECT_NE(st.message().find("kv.k_pe: a split cache"), std::string::npos) << st.message();
        continue;
      }
      bool declined = false;  // the Hopper path's fp8 row rule
      run_and_check(c, /*scale_on_device=*/seed % 2 == 0, be, &declined);
      if (HasFatalFailure()) return;
    }
  }
}

/// Every CUDA operation but the portable dense decode addresses each row in one tensor: a split cache is refused by
/// name (nothing is read: the problems point at device memory that is never touched).
TEST(SplitCacheRefusals, OtherCudaOpsNameTheSplitCache) {
  const Backend& cuda = backend_named("cuda");
  SKIP_UNLESS_AVAILABLE(cuda);
  const Device dev = Device::cuda(0);
  DeviceBuffer mem(size_t(8) << 20);
  ASSERT_NE(mem.get(), nullptr);
  uint8_t* base = mem.as<uint8_t>();
  KvCacheView kv;
  kv.format = KvFormat::kBF16;
  kv.pages = TensorView::contiguous(base, DType::kUInt8, {2, 16, 1024}, dev);
  kv.k_pe = TensorView::contiguous(base + (1 << 20), DType::kUInt8, {2, 16, 128}, dev);
  auto at = [&](int64_t mb) { return static_cast<void*>(base + (mb << 20)); };
  auto refused = [](const Status& st, const std::string& what) {
    EXPECT_EQ(st.code(), StatusCode::kNotSupported) << what << ": " << st.to_string();
    EXPECT_NE(st.message().find("k_pe"), std::string::npos) << what << ": " << st.message();
  };
  {
    SparseDecodeProblem p;
    p.q = TensorView::contiguous(at(2), DType::kBF16, {1, 1, 16, 576}, dev);
    p.kv = kv;
    p.indices = TensorView::contiguous(at(3), DType::kInt32, {1, 1, 64}, dev);
    p.out = TensorView::contiguous(at(4), DType::kBF16, {1, 1, 16, 512}, dev);
    p.softmax_scale = kDeepSeekSoftmaxScale;
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    refused(cuda.supports(p), "cuda sparse_decode");
    // On a GPU other than Hopper the Hopper path refuses everything for that reason first: only its own refusal counts.
    const Backend& sm90 = backend_named("cuda_sm90");
    if (sm90.available().ok()) refused(sm90.supports(p), "cuda_sm90 sparse_decode");
  }
  {
    AppendKvProblem p;
    p.kv_c = TensorView::contiguous(at(2), DType::kBF16, {4, 512}, dev);
    p.k_pe = TensorView::contiguous(at(3), DType::kBF16, {4, 64}, dev);
    p.slot_mapping = TensorView::contiguous(at(4), DType::kInt64, {4}, dev);
    p.cache = kv;
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    refused(cuda.supports(p), "cuda append_kv");
  }
  {
    GatherKvProblem p;
    p.cache = kv;
    p.block_table = TensorView::contiguous(at(2), DType::kInt32, {1, 2}, dev);
    p.seq_lens = TensorView::contiguous(at(3), DType::kInt32, {1}, dev);
    p.cu_out = TensorView::contiguous(at(4), DType::kInt32, {2}, dev);
    p.out = TensorView::contiguous(at(5), DType::kBF16, {32, 576}, dev);
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    refused(cuda.supports(p), "cuda gather_kv");
  }
}

std::string forms_name(const ::testing::TestParamInfo<FormsParam>& info) {
  const auto [b, f, p] = info.param;
  return b + "_" + kv_format_name(f) + "_P" + std::to_string(p);
}

INSTANTIATE_TEST_SUITE_P(Cuda, DecodeForms,
                         ::testing::Combine(::testing::ValuesIn(kCudaDecodeBackends),
                                            ::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla),
                                            ::testing::Values(int64_t(1), int64_t(16), int64_t(64))),
                         forms_name);

// ---- shapes at the edges, on every CUDA decode path ----
class DecodeEdges : public ::testing::TestWithParam<std::string> {};
class DecodeGraph : public ::testing::TestWithParam<std::string> {};
class DecodeSupports : public ::testing::TestWithParam<std::string> {};
class DecodeGolden : public ::testing::TestWithParam<std::string> {};
std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }
INSTANTIATE_TEST_SUITE_P(Cuda, DecodeEdges, ::testing::ValuesIn(kCudaDecodeBackends), backend_param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, DecodeGraph, ::testing::ValuesIn(kCudaDecodeBackends), backend_param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, DecodeSupports, ::testing::ValuesIn(kCudaDecodeBackends), backend_param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, DecodeGolden, ::testing::ValuesIn(kCudaDecodeBackends), backend_param_name);

TEST_P(DecodeEdges, Batch4096WithEmptySlots) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  std::mt19937_64 rng(7);
  DecodeCaseConfig cfg;
  cfg.seq_lens.resize(4096);
  std::uniform_int_distribution<int32_t> dist(0, 80);
  for (auto& l : cfg.seq_lens) l = rng() % 4 == 0 ? 0 : dist(rng);
  cfg.h_q = 16;
  cfg.s_q = 2;
  cfg.causal = true;
  cfg.page_size = 16;
  cfg.seed = 7;
  DecodeCase c = DecodeCase::generate(cfg);
  run_and_check(c, true, be);
}

// Past kCtaPlanMaxRequests (smxx/config.h) the plan kernel cuts the batch instead of the decode CTAs: both schedules
// must agree with the reference, including the partial slots of the requests they split (a few long requests
// among short ones, so that partitions start inside them).
TEST_P(DecodeEdges, LargeBatchThroughThePlanKernel) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  std::mt19937_64 rng(71);
  DecodeCaseConfig cfg;
  cfg.seq_lens.resize(4500);
  std::uniform_int_distribution<int32_t> dist(0, 60);
  for (auto& l : cfg.seq_lens) l = rng() % 500 == 0 ? 3000 : dist(rng);
  cfg.h_q = 16;
  cfg.s_q = 1;
  cfg.page_size = 64;
  cfg.seed = 71;
  DecodeCase c = DecodeCase::generate(cfg);
  run_and_check(c, true, be);
}

// Few partitions per request (at most 8 on the Hopper path: the combine's few-split form, one warp per output row),
// with ragged lengths, empty requests among long ones, so that most requests are split and some have nothing to
// merge; odd row counts (3 heads x 3 tokens). Written for docs/experiments/smxx-fused-combine-few-splits.patch (the
// Hopper kernel merging its own splits), whose row items are two rows.
TEST_P(DecodeEdges, FewSplitsPerRequest) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  std::mt19937_64 rng(23);
  struct Shape {
    int batch, h_q, s_q, page_size;
  };
  for (const Shape sh : {Shape{40, 16, 1, 64}, Shape{17, 128, 1, 1}, Shape{33, 3, 3, 16}, Shape{24, 128, 2, 64}}) {
    DecodeCaseConfig cfg;
    cfg.seq_lens = random_lengths(rng, sh.batch, 3000);
    cfg.seq_lens[1] = 0;
    cfg.seq_lens[sh.batch - 1] = 3000;
    cfg.h_q = sh.h_q;
    cfg.s_q = sh.s_q;
    cfg.causal = sh.s_q > 1;
    cfg.page_size = sh.page_size;
    cfg.seed = 23 + uint64_t(sh.batch);
    DecodeCase c = DecodeCase::generate(cfg);
    run_and_check(c, true, be);
    if (HasFatalFailure()) return;
  }
}

// More requests than partitions: every CTA walks several pieces, so tile ownership and the pipeline's
// barrier phases carry over from request to request (the Hopper path alternates owners across pieces).
TEST_P(DecodeEdges, ManyRequestsPerCta) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  std::mt19937_64 rng(12);
  for (int64_t h_q : {128, 37}) {
    DecodeCaseConfig cfg;
    cfg.seq_lens.resize(600);
    std::uniform_int_distribution<int32_t> dist(0, 300);
    for (auto& l : cfg.seq_lens) l = dist(rng);
    cfg.h_q = h_q;
    cfg.s_q = h_q == 37 ? 3 : 1;
    cfg.causal = h_q == 37;
    cfg.page_size = h_q == 37 ? 32 : 64;
    cfg.seed = 12 + uint64_t(h_q);
    DecodeCase c = DecodeCase::generate(cfg);
    run_and_check(c, true, be);
  }
}

// Uniform (or nearly uniform) lengths, where the plan keeps requests whole instead of splitting them when that costs
// the busiest partition at most kSplitCostTiles (smxx/plan.cuh, whole_requests_per_partition). On a 132-SM GPU: 200
// requests of 256 keys at 16 heads and 100 of 512 at 128 heads, two per partition (or CTA pair) where the even split
// would cut every other request; 264 of 256 and 132 of 512, where both schedules coincide; 264 alternating 256 and 200
// keys at page 16 (nearly uniform in the portable path's tiles of 32); all through the decode CTAs' own plan; and 4,500
// of 100 keys through the plan kernel (35 per partition; two key tiles each, so a plan kernel that split them by the
// work model after all would be seen on both paths). The workspace and outputs start poisoned, so a schedule whose
// partitions and per-request plans disagree (a row left unwritten, or merged from partials never written) fails against
// the reference; whether the rule is taken is not visible here (docs/performance.md times it).
TEST_P(DecodeEdges, UniformLengthsKeepRequestsWhole) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  struct Shape {
    int batch, len, other_len, h_q, page_size;
  };
  for (const Shape sh : {Shape{200, 256, 256, 16, 64}, Shape{100, 512, 512, 128, 64}, Shape{264, 256, 256, 16, 64},
                         Shape{132, 512, 512, 128, 64}, Shape{264, 256, 200, 16, 16},
                         Shape{4500, 100, 100, 16, 64}}) {
    DecodeCaseConfig cfg;
    cfg.seq_lens.resize(size_t(sh.batch));
    for (int r = 0; r < sh.batch; ++r) cfg.seq_lens[size_t(r)] = r % 2 == 0 ? sh.len : sh.other_len;
    cfg.h_q = sh.h_q;
    cfg.page_size = sh.page_size;
    cfg.seed = 31 + uint64_t(sh.batch) + uint64_t(sh.h_q);
    DecodeCase c = DecodeCase::generate(cfg);
    run_and_check(c, true, be);
    if (HasFatalFailure()) return;
  }
}

// The few-row kernels in dense decode (sm80/few_rows.cuh, decode_few_rows_dsmla_dense and decode_few_rows_e4m3_dense:
// fp8_ds_mla or fp8_e4m3, q bf16, one query token, <= 16 heads), against the reference: 1, 3, 9 and 16 heads; page sizes
// 1 (a page per row), 16, 64 and 128 and a padded page stride; 3 requests (lengths 0, 1 and up to 4000: the long one
// split over every SM's CTAs, pieces of up to 3 tiles on an H100), 16 requests of up to 20,000 keys (pieces of ~17
// tiles: the two raw stages and three flag / scale slots wrap many times), 400 ragged ones with empty slots (the CTA
// plan: several pieces per CTA, so the rings restart per piece) and 4500 (the plan kernel); for fp8_e4m3 a scale that
// is not a power of two, read from device memory (kv_scale_value then NaN, so a kernel that read it would fail) or
// passed by value, and scales of 0 and below 0 from device memory (which validation cannot see: the masked columns
// must stay out of the row's maximum). Unused pool pages, the padding between pages and the outputs are NaN-poisoned
// (DecodeCase, run_and_check). gpu_test_context_parallel runs them on context shards.
class DecodeFewRows : public ::testing::TestWithParam<KvFormat> {};

TEST_P(DecodeFewRows, OneTokenMatchesReference) {
  const Backend& be = backend_named("cuda");
  SKIP_UNLESS_AVAILABLE(be);
  const KvFormat format = GetParam();
  uint64_t seed = 9100 + uint64_t(format) * 1000;
  for (const int64_t h_q : {int64_t(1), int64_t(3), int64_t(9), int64_t(16)}) {
    for (const int64_t page_size : {int64_t(1), int64_t(16), int64_t(64), int64_t(128)}) {
      std::mt19937_64 rng(++seed);
      struct Shape {
        int batch, max_len;
      };
      for (const Shape sh : {Shape{3, 4000}, Shape{16, 20000}, Shape{400, 700}, Shape{4500, 60}}) {
        // The plan kernel's path and the long pieces: one or two page sizes are enough, and the long pieces at 16
        // heads only (their rows and reference are most of this test's CPU time: 82 s for both formats on the H100
        // machine, 2026-11-28).
        if (sh.batch == 4500 && page_size != 64) continue;
        if (sh.batch == 16 && ((page_size != 64 && page_size != 1) || h_q != 16)) continue;
        DecodeCaseConfig cfg;
        cfg.seq_lens = random_lengths(rng, sh.batch, sh.max_len);
        cfg.h_q = h_q;
        cfg.s_q = 1;
        cfg.page_size = page_size;
        cfg.page_padding_bytes = page_size == 16 ? 48 : 0;
        cfg.format = format;
        cfg.kv_scale = 0.0123f;  // fp8_e4m3 only: values up to 1 become e4m3 magnitudes up to 81
        cfg.q_dtype = DType::kBF16;
        cfg.seed = ++seed;
        DecodeCase c = DecodeCase::generate(cfg);
        run_and_check(c, /*scale_on_device=*/seed % 2 == 0, be);
        if (HasFatalFailure()) return;
        if (format == KvFormat::kFP8E4M3 && sh.batch == 400) {
          // The same rows read with a scale of 0, then of -0.0123, from device memory.
          for (const float s : {0.0f, -0.0123f}) {
            SCOPED_TRACE("kv_scale " + std::to_string(s));
            c.config.kv_scale = s;
            c.poison_outputs();
            run_and_check(c, /*scale_on_device=*/true, be);
            if (HasFatalFailure()) return;
          }
          // q past fp16's range (65504), then so small that fp16 would keep only a few bits of it: the kernel's fp16
          // operands take q divided by a power of two and multiply the partial scores back (few_rows.cuh, q_to_f16);
          // without that both would fail. The softmax scale keeps the logits as above.
          for (const float q_range : {2.0e5f, 1.0e-6f}) {
            SCOPED_TRACE("q_range " + std::to_string(q_range));
            DecodeCaseConfig qc = cfg;
            qc.q_range = q_range;
            qc.softmax_scale = kDeepSeekSoftmaxScale / q_range;
            qc.seed = ++seed;
            DecodeCase qcase = DecodeCase::generate(qc);
            run_and_check(qcase, /*scale_on_device=*/false, be);
            if (HasFatalFailure()) return;
          }
        }
      }
    }
  }
}

// The few-row kernels' selection rule (host_sm80.cpp), which the tests above cannot see (the portable kernel would
// pass them too): which variants of a call take them. Host code only: runs without a GPU.
TEST(DecodeFewRowsRule, WhichCallsTakeTheFewRowKernels) {
  namespace dec = mlakit::cuda::decode;
  using dec::KvKind;
  using dec::Sm80Variant;
  auto v = [](bool bf16, KvKind kind, bool sparse, bool v4, bool one_token) {
    return Sm80Variant{bf16, kind, sparse, v4, one_token};
  };
  for (const KvKind kind : {KvKind::kDsMla, KvKind::kE4M3}) {
    EXPECT_TRUE(dec::sm80_takes_few_rows(16, v(true, kind, false, false, true)));
    EXPECT_TRUE(dec::sm80_takes_few_rows(1, v(true, kind, false, false, true)));
    EXPECT_FALSE(dec::sm80_takes_few_rows(17, v(true, kind, false, false, true)));   // more than 16 heads
    EXPECT_FALSE(dec::sm80_takes_few_rows(16, v(false, kind, false, false, true)));  // fp16 q
    EXPECT_FALSE(dec::sm80_takes_few_rows(16, v(true, kind, false, false, false)));  // s_q > 1 or a split cache
  }
  EXPECT_FALSE(dec::sm80_takes_few_rows(16, v(true, KvKind::k16Bit, false, false, true)));
  EXPECT_TRUE(dec::sm80_takes_few_rows(16, v(true, KvKind::kDsMla, true, false, false)));  // V3.2 sparse
  EXPECT_TRUE(dec::sm80_takes_few_rows(16, v(true, KvKind::kDsV4, true, true, false)));    // V4 sparse
  EXPECT_TRUE(dec::sm80_takes_few_rows(16, v(true, KvKind::kE4M3, true, false, false)));   // sparse fp8_e4m3, V3
  EXPECT_FALSE(dec::sm80_takes_few_rows(16, v(true, KvKind::kE4M3, true, true, false)));   // V4's geometry
  EXPECT_FALSE(dec::sm80_takes_few_rows(16, v(false, KvKind::kE4M3, true, false, false)));  // fp16 q

  // dense_variant's one_token: one query token and a joined cache.
  for (const int64_t s_q : {int64_t(1), int64_t(2)}) {
    for (const bool split : {false, true}) {
      DecodeCaseConfig cfg;
      cfg.seq_lens = {5, 40};
      cfg.s_q = s_q;
      cfg.causal = s_q > 1;
      cfg.format = KvFormat::kFP8E4M3;
      cfg.seed = 3;
      DecodeCase c = test::split_case(DecodeCase::generate(cfg), split, false);
      const Sm80Variant got = dec::dense_variant(c.problem());
      EXPECT_EQ(got.one_token, s_q == 1 && !split) << "s_q " << s_q << (split ? ", split" : ", joined");
      EXPECT_TRUE(got.bf16);
      EXPECT_EQ(got.kind, KvKind::kE4M3);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, DecodeFewRows, ::testing::Values(KvFormat::kFP8DsMla, KvFormat::kFP8E4M3),
                         [](const ::testing::TestParamInfo<KvFormat>& info) {
                           return std::string(kv_format_name(info.param));
                         });

TEST_P(DecodeEdges, AllEmpty) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  DecodeCaseConfig cfg;
  cfg.seq_lens = {0, 0, 0};
  cfg.h_q = 128;
  cfg.seed = 8;
  DecodeCase c = DecodeCase::generate(cfg);
  run_and_check(c, true, be);
}

TEST_P(DecodeEdges, LongSingleRequest) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  DecodeCaseConfig cfg;
  cfg.seq_lens = {131072};
  cfg.h_q = 16;
  cfg.seed = 9;
  DecodeCase c = DecodeCase::generate(cfg);
  run_and_check(c, true, be);
}

TEST_P(DecodeEdges, MillionTokens) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  DecodeCaseConfig cfg;
  cfg.seq_lens = {1048576, 3};
  cfg.h_q = 2;
  cfg.page_size = 128;
  cfg.extra_pages = 1;
  cfg.seed = 10;
  DecodeCase c = DecodeCase::generate(cfg);
  run_and_check(c, true, be);
}

// A cache whose used pages sit past 2^31 elements (4 GiB of bf16): 64-bit address arithmetic.
TEST_P(DecodeEdges, CachePast2To31Elements) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  DecodeCaseConfig cfg;
  cfg.seq_lens = {300, 77};
  cfg.h_q = 16;
  cfg.page_size = 64;
  cfg.seed = 11;
  DecodeCase c = DecodeCase::generate(cfg);
  const int64_t page_bytes = c.page_stride_bytes;
  const int64_t offset_pages = ((int64_t(1) << 32) + page_bytes - 1) / page_bytes + 1;  // > 2^31 bf16 elements
  const size_t total = size_t(offset_pages * page_bytes) + c.cache.size();
  DeviceDecodeCase d;
  d.upload(c, true);
  DeviceBuffer big(total);
  ASSERT_NE(big.get(), nullptr) << "cannot allocate " << total << " bytes";
  CUDA_OK(cudaMemset(big.get(), kPoison, total));
  CUDA_OK(cudaMemcpy(big.as<uint8_t>() + offset_pages * page_bytes, c.cache.data(), c.cache.size(),
                     cudaMemcpyHostToDevice));
  std::vector<int32_t> table = c.block_table;
  for (int64_t b = 0; b < c.batch; ++b)
    for (int64_t j = 0; j < (c.seq_lens[b] + cfg.page_size - 1) / cfg.page_size; ++j)
      table[b * c.table_row_stride + j] += int32_t(offset_pages);
  d.block_table.copy_from(table);
  DecodeProblem p = d.problem;
  p.kv.pages.data = big.get();
  p.kv.pages.shape[0] = offset_pages + c.num_pages;
  const size_t ws_bytes = be.workspace_bytes(p);
  DeviceBuffer ws(ws_bytes);
  ASSERT_TRUE(be.plan(p, {ws.get(), ws_bytes}, nullptr).ok());
  ASSERT_TRUE(be.run(p, {ws.get(), ws_bytes}, nullptr).ok());
  CUDA_OK(cudaDeviceSynchronize());
  ASSERT_TRUE(reference::decode(c.problem()).ok());
  expect_outputs_match(d, c);
}

// One plan, then many runs (a step's layers), eagerly and replayed from a CUDA graph of run alone: a run must leave
// nothing in the workspace that the next run depends on (docs/spec.md section 9: one plan serves every layer). Twenty
// requests of 33 heads x 2 query tokens (two 64-row blocks on the Hopper path, the second of 2 rows): nineteen of up to
// 2000 keys, split in one to four parts, and one of 20,000 split over many partitions; the workspace is poisoned before
// the plan, out and lse before every run. (It caught both faults of a kernel that counted split parts in the
// workspace, docs/experiments/sm90-merge-in-kernel.patch: counters not reset by a run, or not zeroed by the plan.)
TEST_P(DecodeEdges, OnePlanServesRepeatedRunsAndReplays) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  std::mt19937_64 rng(31);
  DecodeCaseConfig cfg;
  cfg.seq_lens = random_lengths(rng, 20, 2000);
  cfg.seq_lens[7] = 20000;
  cfg.h_q = 33;
  cfg.s_q = 2;
  cfg.causal = true;
  cfg.page_size = 64;
  cfg.seed = 31;
  DecodeCase c = DecodeCase::generate(cfg);
  DeviceDecodeCase d;
  d.upload(c, true);
  ASSERT_TRUE(be.supports(d.problem).ok());
  ASSERT_TRUE(reference::decode(c.problem()).ok());  // c.out and c.lse now hold the reference
  const size_t ws_bytes = be.workspace_bytes(d.problem);
  d.ws.allocate(ws_bytes);
  CUDA_OK(cudaMemset(d.ws.get(), kPoison, ws_bytes));
  const Workspace ws{d.ws.get(), ws_bytes};
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  const Status planned = be.plan(d.problem, ws, stream);
  ASSERT_TRUE(planned.ok()) << planned.to_string();
  auto poison_outputs = [&] {
    CUDA_OK(cudaMemsetAsync(d.out.get(), kPoison, c.out.size() * 2, stream));
    CUDA_OK(cudaMemsetAsync(d.lse.get(), kPoison, c.lse.size() * 4, stream));
  };
  auto check = [&](const std::string& what) {
    SCOPED_TRACE(what);
    CUDA_OK(cudaStreamSynchronize(stream));
    expect_outputs_match(d, c);
  };
  for (int run = 0; run < 3; ++run) {
    poison_outputs();
    const Status st = be.run(d.problem, ws, stream);
    ASSERT_TRUE(st.ok()) << st.to_string();
    check("run " + std::to_string(run));
    if (HasFatalFailure()) return;
  }
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status captured = be.run(d.problem, ws, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(captured.ok()) << captured.to_string();
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    poison_outputs();
    CUDA_OK(cudaGraphLaunch(exec, stream));
    check("replay " + std::to_string(replay));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- CUDA graphs: capture plan + run once, replay with new seq_lens, block tables and q ----
// Three shapes: MTP (h 32, s_q 2, bf16); one query token at 16 heads with an fp8_e4m3 cache (the few-row kernel on
// `cuda`; the portable one's fp8 rule applies on the Hopper path, which then declines it); and 40 requests at 16
// heads, bf16. On the Hopper path (132 partitions on an H100) the combine takes its many-split form at 8 requests
// (more than 8 partitions per request) and its few-split form at 40.
struct GraphShape {
  int batch, h_q, s_q;
  KvFormat format;
  const char* name;
};
void graph_replays(const Backend& be, const GraphShape& shape);

TEST_P(DecodeGraph, ReplayWithNewInputs) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  for (const GraphShape& shape : {GraphShape{8, 32, 2, KvFormat::kBF16, "b 8, h 32, s_q 2, bf16"},
                                  GraphShape{8, 16, 1, KvFormat::kFP8E4M3, "b 8, h 16, s_q 1, fp8_e4m3"},
                                  GraphShape{40, 16, 1, KvFormat::kBF16, "b 40, h 16, s_q 1, bf16"}}) {
    SCOPED_TRACE(shape.name);
    graph_replays(be, shape);
    if (HasFatalFailure()) return;
  }
}

void graph_replays(const Backend& be, const GraphShape& shape) {
  constexpr int32_t kMaxLen = 900;
  constexpr int kReplays = 4;
  const int batch = shape.batch;
  auto make = [&](uint64_t seed) {
    std::mt19937_64 rng(seed);
    DecodeCaseConfig cfg;
    cfg.seq_lens = random_lengths(rng, batch, kMaxLen);
    cfg.seq_lens[seed % batch] = kMaxLen;  // fixes the table width, so every replay has the same shapes
    cfg.h_q = shape.h_q;
    cfg.s_q = shape.s_q;
    cfg.causal = shape.s_q > 1;
    cfg.format = shape.format;
    cfg.kv_scale = 0.01f + 0.002f * float(seed % 5);  // fp8_e4m3: each replay its own scale, read from the device
    cfg.page_size = 32;
    cfg.seed = seed + uint64_t(shape.format) * 1000 + uint64_t(batch);
    return DecodeCase::generate(cfg);
  };
  DecodeCase first = make(100);
  const int64_t max_pages = batch * ((kMaxLen + 31) / 32) + first.config.extra_pages;
  DeviceDecodeCase d;
  d.upload(first, true, 0, size_t(max_pages * first.page_stride_bytes));
  DecodeProblem p = d.problem;
  p.kv.pages.shape[0] = max_pages;
  if (is_fp8_row_refusal(be.supports(p))) return;  // the Hopper path's fp8 row rule (hopper_fp8_rule.h)
  const size_t ws_bytes = be.workspace_bytes(p);
  d.ws.allocate(ws_bytes);
  const Workspace ws{d.ws.get(), ws_bytes};

  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status s1 = be.plan(p, ws, stream);
  const Status s2 = be.run(p, ws, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(s1.ok()) << s1.to_string();
  ASSERT_TRUE(s2.ok()) << s2.to_string();
  cudaGraphExec_t exec;
  CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));

  for (int rep = 0; rep < kReplays; ++rep) {
    SCOPED_TRACE("replay " + std::to_string(rep));
    DecodeCase c = make(200 + rep);
    ASSERT_EQ(c.table_row_stride, first.table_row_stride);
    ASSERT_LE(c.num_pages, max_pages);
    d.refill(c);  // the new case's q, cache, table, lengths and scale; outputs poisoned
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    ASSERT_TRUE(reference::decode(c.problem()).ok());
    expect_outputs_match(d, c);
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- refusals name the field, the value and the rule ----
TEST_P(DecodeSupports, RefusesWhatItDoesNotImplement) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  DecodeCaseConfig cfg;
  cfg.seq_lens = {5};
  {
    cfg.page_size = 8;
    DecodeCase c = DecodeCase::generate(cfg);
    DeviceDecodeCase d;
    d.upload(c, true);
    const Status st = be.supports(d.problem);
    EXPECT_EQ(st.code(), StatusCode::kNotSupported);
    EXPECT_NE(st.message().find("page_size=8"), std::string::npos) << st.message();
  }
  {
    cfg.page_size = 64;
    cfg.dims = MlaDims{256, 32};
    DecodeCase c = DecodeCase::generate(cfg);
    DeviceDecodeCase d;
    d.upload(c, true);
    const Status st = be.supports(d.problem);
    EXPECT_EQ(st.code(), StatusCode::kNotSupported);
    EXPECT_NE(st.message().find("d_c=256"), std::string::npos) << st.message();
  }
  {
    cfg.dims = MlaDims{};
    cfg.format = KvFormat::kBF16;
    cfg.q_dtype = DType::kFP16;
    DecodeCase c = DecodeCase::generate(cfg);
    DeviceDecodeCase d;
    d.upload(c, true);
    const Status st = be.supports(d.problem);
    EXPECT_EQ(st.code(), StatusCode::kNotSupported);
    EXPECT_NE(st.message().find("q.dtype=fp16"), std::string::npos) << st.message();
  }
}

// out rows that are not 16-byte aligned (the pointer, or a row stride) are refused by name: the kernels write out in
// 16-byte pieces (the Hopper epilogue since its 16-byte stores), so no such row may reach them. In memory of its own,
// so that the moved view lies inside an allocation and overlaps nothing.
TEST_P(DecodeSupports, RefusesOutRowsNot16ByteAligned) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  DecodeCaseConfig cfg;
  cfg.seq_lens = {5, 70};
  DecodeCase c = DecodeCase::generate(cfg);
  DeviceDecodeCase d;
  d.upload(c, true);
  ASSERT_TRUE(be.supports(d.problem).ok()) << be.supports(d.problem).message();
  const TensorView out = d.problem.out;  // [b, s_q, h_q, d_c], contiguous
  const int64_t padded = out.shape[3] + 4;  // 8 bytes more per row: rows 8-byte, not 16-byte, aligned
  DeviceBuffer room(size_t(out.shape[0] * out.shape[1] * out.shape[2] * padded * 2 + 16));
  ASSERT_NE(room.get(), nullptr);
  {
    DecodeProblem p = d.problem;
    p.out.data = room.as<uint8_t>() + 8;
    const Status st = be.supports(p);
    EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
    EXPECT_NE(st.message().find("out.data"), std::string::npos) << st.message();
  }
  {
    DecodeProblem p = d.problem;
    p.out.data = room.get();
    p.out.stride[2] = padded;
    p.out.stride[1] = out.shape[2] * padded;  // h_q = 16: 16-byte multiples, so only stride[2] is refused
    p.out.stride[0] = out.shape[1] * p.out.stride[1];
    const Status st = be.supports(p);
    EXPECT_EQ(st.code(), StatusCode::kNotSupported) << st.to_string();
    EXPECT_NE(st.message().find("out.stride[2]=" + std::to_string(padded)), std::string::npos) << st.message();
  }
}

// ---- selection: the Hopper path where it can run, the portable one elsewhere, each with its reason ----
TEST(DecodeSelection, HopperPathChosenOnlyWhereItRuns) {
  if (!has_gpu()) GTEST_SKIP() << "no CUDA device";
  const Registry registry = make_default_registry();
  const Backend& hopper = backend_named("cuda_sm90");
  DecodeCaseConfig cfg;
  cfg.seq_lens = {70, 3};
  DecodeCase bf16 = DecodeCase::generate(cfg);
  cfg.format = KvFormat::kFP8E4M3;
  DecodeCase fp8 = DecodeCase::generate(cfg);  // 16 query rows per request
  cfg.s_q = 2;
  DecodeCase fp8_32 = DecodeCase::generate(cfg);  // 32
  DeviceDecodeCase d16, d8, d8_32;
  d16.upload(bf16, true);
  d8.upload(fp8, true);
  d8_32.upload(fp8_32, true);
  auto reason_for = [](const Selection& sel, const std::string& name) {
    for (const Rejection& r : sel.passed_over)
      if (r.backend == name) return r.reason;
    return std::string("(not passed over)");
  };
  const Selection s16 = registry.select(d16.problem);
  const Selection s8 = registry.select(d8.problem);
  const Selection s8_32 = registry.select(d8_32.problem);
  ASSERT_NE(s16.backend, nullptr) << s16.explain();
  ASSERT_NE(s8.backend, nullptr) << s8.explain();
  ASSERT_NE(s8_32.backend, nullptr) << s8_32.explain();
  EXPECT_EQ(s8.backend->name(), "cuda") << s8.explain();
  if (hopper.available().ok()) {
    EXPECT_EQ(s16.backend->name(), "cuda_sm90") << s16.explain();
    EXPECT_EQ(reason_for(s16, "cuda"), "lower priority than 'cuda_sm90'");
    // fp8 from 17 query rows per request on the Hopper path; up to 16 on the portable one, with the reason.
    EXPECT_EQ(s8_32.backend->name(), "cuda_sm90") << s8_32.explain();
    EXPECT_NE(reason_for(s8, "cuda_sm90").find("kv.format=fp8_e4m3 with 16 query rows per request"), std::string::npos)
        << s8.explain();
  } else {
    // Not a Hopper GPU: the portable path runs, the Hopper one says why not, and naming it is an error.
    EXPECT_EQ(s16.backend->name(), "cuda") << s16.explain();
    EXPECT_EQ(s8_32.backend->name(), "cuda") << s8_32.explain();
    EXPECT_NE(reason_for(s16, "cuda_sm90").find("not available"), std::string::npos) << s16.explain();
    const Selection named = registry.select(d16.problem, Preference{"cuda_sm90"});
    EXPECT_EQ(named.backend, nullptr);
    EXPECT_NE(named.status.message().find("not available"), std::string::npos) << named.status.to_string();
  }
}

// ---- golden FlashMLA dense cases ----
bool manifest_causal(const std::string& manifest, const std::string& name) {
  const size_t at = manifest.find("\"name\": \"" + name + "\"");
  const size_t c = manifest.find("\"causal\":", at);
  return manifest.compare(c, 14, "\"causal\": true") == 0;
}

TEST_P(DecodeGolden, FlashMlaDenseCases) {
  const Backend& be = backend_named(GetParam());
  SKIP_UNLESS_AVAILABLE(be);
  const std::string dir = std::string(MLAKIT_TESTDATA_DIR) + "/flashmla";
  std::ifstream mf(dir + "/manifest.json");
  if (!mf) GTEST_SKIP() << "no golden data at " << dir;
  std::stringstream ss;
  ss << mf.rdbuf();
  const std::string manifest = ss.str();
  int cases = 0;
  for (const char* name : {"dense_b1_sq1_h64", "dense_b2_sq2_h128_causal", "dense_b3_sq1_h16",
                           "dense_b4_sq4_h9_causal_empty"}) {
    SCOPED_TRACE(name);
    const std::string base = dir + "/" + name + "/";
    NpyArray q, kv, bt, sl, out, lse;
    std::string err;
    ASSERT_TRUE(load_npy(base + "q.npy", &q, &err)) << err;
    ASSERT_TRUE(load_npy(base + "kv_cache.npy", &kv, &err)) << err;
    ASSERT_TRUE(load_npy(base + "block_table.npy", &bt, &err)) << err;
    ASSERT_TRUE(load_npy(base + "seq_lens.npy", &sl, &err)) << err;
    ASSERT_TRUE(load_npy(base + "out.npy", &out, &err)) << err;
    ASSERT_TRUE(load_npy(base + "lse.npy", &lse, &err)) << err;
    const int64_t b = q.shape[0], s_q = q.shape[1], h_q = q.shape[2];
    const int64_t num_pages = kv.shape[0], page = kv.shape[1];
    const bool causal = manifest_causal(manifest, name);

    const size_t rows = size_t(b * s_q * h_q);
    DeviceBuffer dq, dkv, dbt, dsl, dout, dlse;
    DeviceBuffer::upload(&dq, q.data);
    DeviceBuffer::upload(&dkv, kv.data);
    DeviceBuffer::upload(&dbt, bt.data);
    DeviceBuffer::upload(&dsl, sl.data);
    DeviceBuffer::upload(&dout, std::vector<uint8_t>(rows * kDimC * 2, kPoison));
    DeviceBuffer::upload(&dlse, std::vector<uint8_t>(rows * 4, kPoison));

    DecodeProblem p;
    p.q = TensorView::contiguous(dq.get(), DType::kBF16, {b, s_q, h_q, kDimQK}, Device::cuda(0));
    p.kv = KvCacheView::contiguous(dkv.get(), KvFormat::kBF16, num_pages, page, MlaDims{}, Device::cuda(0));
    p.block_table = TensorView::contiguous(dbt.get(), DType::kInt32, {b, bt.shape[1]}, Device::cuda(0));
    p.seq_lens = TensorView::contiguous(dsl.get(), DType::kInt32, {b}, Device::cuda(0));
    p.out = TensorView::contiguous(dout.get(), DType::kBF16, {b, s_q, h_q, kDimC}, Device::cuda(0));
    p.lse = TensorView::contiguous(dlse.get(), DType::kFP32, {b, s_q, h_q}, Device::cuda(0));
    p.softmax_scale = kDeepSeekSoftmaxScale;
    p.causal = causal;
    const size_t ws_bytes = be.workspace_bytes(p);
    DeviceBuffer ws(ws_bytes);
    Status st = be.plan(p, {ws.get(), ws_bytes}, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    st = be.run(p, {ws.get(), ws_bytes}, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = dout.download<uint16_t>(rows * kDimC);
    const std::vector<float> got_lse = dlse.download<float>(rows);

    // FlashMLA's conventions -> MLAKit's: lse [b, h_q, s_q] -> [b, s_q, h_q], +inf (empty) -> -inf.
    const std::vector<uint16_t> kv_bits = kv.to_vector<uint16_t>();
    const std::vector<int32_t> table = bt.to_vector<int32_t>();
    const std::vector<int32_t> lens = sl.to_vector<int32_t>();
    std::vector<float> ref_lse(got_lse.size()), vmax(got_lse.size());
    for (int64_t bi = 0; bi < b; ++bi) {
      float vm = 0.0f;
      for (int64_t t = 0; t < lens[bi]; ++t) {
        const int64_t pg = table[bi * bt.shape[1] + t / page];
        const uint16_t* row = kv_bits.data() + (pg * page + t % page) * kDimQK;
        for (int64_t cidx = 0; cidx < kDimC; ++cidx) {
          uint32_t u = uint32_t(row[cidx]) << 16;
          float f;
          std::memcpy(&f, &u, 4);
          vm = std::max(vm, std::fabs(f));
        }
      }
      for (int64_t i = 0; i < s_q; ++i)
        for (int64_t h = 0; h < h_q; ++h) {
          const float l = lse.at<float>((bi * h_q + h) * s_q + i);
          ref_lse[(bi * s_q + i) * h_q + h] = std::isinf(l) && l > 0 ? -INFINITY : l;
          vmax[(bi * s_q + i) * h_q + h] = vm;
        }
    }
    EXPECT_TRUE(check_out(to_floats(got, DType::kBF16), to_floats(out.to_vector<uint16_t>(), DType::kBF16), vmax,
                          kDimC, DType::kBF16));
    EXPECT_TRUE(check_lse(got_lse, ref_lse));
    ++cases;
  }
  EXPECT_EQ(cases, 4);
}

}  // namespace
}  // namespace mlakit::test
