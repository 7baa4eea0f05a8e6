// Every CUDA sparse decode path (issue 9, docs/spec.md section 2: the portable "cuda" and the Hopper
// "cuda_sm90") against the CPU reference with docs/spec.md section 10's
// tolerances: every format x head counts {1, 3, 16, 32, 63, 64, 128} x s_q {1, 2, 4} x topk {1, 63, 512,
// 2048}, with and without topk_length and attn_sink, odd page sizes, NaN-poisoned rows that only ignored
// columns point at, negative ids, ids past the cache, duplicates, all-invalid rows, sinks of +-inf, a
// prefill-sized batch, CUDA-graph replay and the golden FlashMLA sparse cases.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "common/golden.h"
#include "hopper_fp8_rule.h"
#include "common/npy.h"
#include "reference/ops.h"
#include "device_case.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr int64_t kDimC = 512;
constexpr uint8_t kPoison = 0xFF;
constexpr float kInf = std::numeric_limits<float>::infinity();

#define SPARSE_CUDA(call) CACHE_TEST_CUDA(call)

/// The CUDA sparse decode paths every test runs against.
const std::vector<std::string> kSparseBackends = {"cuda", "cuda_sm90"};

/// The backend named by the test parameter, or skip the calling test with the reason.
#define SPARSE_BACKEND_OR_SKIP(be, name)                  \
  std::string why_not_;                                   \
  const Backend* be = cuda_backend(&why_not_, name);      \
  if (be == nullptr) GTEST_SKIP() << why_not_;

std::string describe(const SparseCase& c) {
  const SparseCaseConfig& g = c.config;
  return "b=" + std::to_string(g.batch) + " s_q=" + std::to_string(g.s_q) + " h_q=" + std::to_string(g.h_q) +
         " topk=" + std::to_string(g.topk) + " P=" + std::to_string(g.page_size) + " format=" +
         kv_format_name(g.format) + " topk_length=" + std::to_string(!g.topk_length.empty()) +
         " sink=" + std::to_string(!g.attn_sink.empty()) + " seed=" + std::to_string(g.seed);
}

/// Runs the backend on the device copy (after `edit`, which may change device buffers), the reference on
/// the host case, and compares every element.
template <class Edit>
void run_and_check(SparseCase& c, const Backend& be, bool scale_on_device, Edit&& edit) {
  SCOPED_TRACE(describe(c));
  DeviceSparseCase d;
  d.upload(c, scale_on_device);
  edit(d);
  const Status sup = be.supports(d.problem);
  // The one refusal that skips (hopper_fp8_rule.h; the selection test checks the rule); any other one fails.
  if (is_fp8_row_refusal(sup)) {
    GTEST_SKIP() << be.name() << ": " << sup.message();
  }
  ASSERT_TRUE(sup.ok()) << sup.to_string();
  const size_t ws_bytes = be.workspace_bytes(d.problem);
  ASSERT_GT(ws_bytes, 0u);
  d.ws.allocate(ws_bytes);
  SPARSE_CUDA(cudaMemset(d.ws.get(), kPoison, ws_bytes));  // the caller need not zero it
  const Status st = be.run(d.problem, Workspace{d.ws.get(), ws_bytes}, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  SPARSE_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> out_dev = d.out.download<uint16_t>(c.out.size());
  const std::vector<float> lse_dev = d.lse.download<float>(c.lse.size());

  const Status ref = reference::sparse_decode(c.problem());
  ASSERT_TRUE(ref.ok()) << ref.to_string();
  EXPECT_TRUE(check_out(to_floats(out_dev, c.config.q_dtype), c.out_floats(), c.row_vmax(), kDimC, c.config.q_dtype));
  if (!lse_dev.empty()) {
    EXPECT_TRUE(check_lse(lse_dev, c.lse));
  }
}

void run_and_check(SparseCase& c, const Backend& be, bool scale_on_device) {
  run_and_check(c, be, scale_on_device, [](DeviceSparseCase&) {});
}

/// The formats the edge tests run: DeepSeek's fp8_ds_mla and bf16 (the matrix covers all four).
std::vector<KvFormat> edge_formats(const Backend&) { return {KvFormat::kFP8DsMla, KvFormat::kBF16}; }

DType q_dtype_for(KvFormat f, uint64_t seed) {
  if (f == KvFormat::kBF16) return DType::kBF16;
  if (f == KvFormat::kFP16) return DType::kFP16;
  return seed % 2 == 0 ? DType::kBF16 : DType::kFP16;
}

std::vector<float> random_sinks(std::mt19937_64& rng, int64_t h_q) {
  std::uniform_real_distribution<float> dist(-2.0f, 6.0f);
  std::vector<float> s(static_cast<size_t>(h_q));
  for (float& v : s) v = dist(rng);
  s[0] = -kInf;                            // no effect
  if (h_q > 2) s[size_t(h_q / 2)] = kInf;  // zeroes the output
  return s;
}

// ---- the matrix: format x h_q, each over s_q {1, 2, 4} x topk {1, 63, 512, 2048} ----
using MatrixParam = std::tuple<std::string, KvFormat, int64_t>;
class SparseMatrix : public ::testing::TestWithParam<MatrixParam> {};

TEST_P(SparseMatrix, MatchesReference) {
  const auto [backend, format, h_q] = GetParam();
  SPARSE_BACKEND_OR_SKIP(be, backend);
  uint64_t seed = 5000 + uint64_t(h_q) * 13 + uint64_t(format) * 7919;
  constexpr int64_t kPageSizes[] = {64, 1, 53, 16, 69, 128};  // any P in sparse mode, powers of two or not
  constexpr int64_t kSq[] = {1, 2, 4};
  constexpr int64_t kTopk[] = {1, 63, 512, 2048};
  int run = 0;
  for (int si = 0; si < 3; ++si) {
    for (int ti = 0; ti < 4; ++ti) {
      const int64_t s_q = kSq[si], topk = kTopk[ti];
      // Four kinds of call, (si + ti) % 4: neither topk_length nor sink, both, topk_length only, sink only. Each kind
      // comes three times, and every topk meets three of them across the three s_q.
      const int kind = (si + ti) % 4;
      const bool with_lengths = kind == 1 || kind == 2;
      const bool with_sink = kind == 1 || kind == 3;
      std::mt19937_64 rng(seed);
      SparseCaseConfig cfg;
      cfg.batch = 2;
      cfg.s_q = s_q;
      cfg.h_q = h_q;
      cfg.topk = topk;
      cfg.format = format;
      cfg.q_dtype = q_dtype_for(format, seed);
      cfg.page_size = kPageSizes[run % 6];
      cfg.num_pages = std::max<int64_t>(2, (topk + 200) / cfg.page_size + 1);
      if (with_lengths) {
        std::uniform_int_distribution<int32_t> len(0, int32_t(topk));
        cfg.topk_length = {len(rng), int32_t(topk)};
      }
      if (with_sink) cfg.attn_sink = random_sinks(rng, h_q);
      SCOPED_TRACE("s_q=" + std::to_string(s_q) + " topk=" + std::to_string(topk) +
                   (with_lengths ? " topk_length" : "") + (with_sink ? " sink" : ""));
      cfg.seed = seed++;
      SparseCase c = SparseCase::generate(cfg);
      run_and_check(c, *be, /*scale_on_device=*/seed % 2 == 0);
      if (HasFatalFailure() || IsSkipped()) return;
      ++run;
    }
  }
}

std::string matrix_name(const ::testing::TestParamInfo<MatrixParam>& info) {
  const auto [b, f, h] = info.param;
  return b + "_" + kv_format_name(f) + "_h" + std::to_string(h);
}

INSTANTIATE_TEST_SUITE_P(Cuda, SparseMatrix,
                         ::testing::Combine(::testing::ValuesIn(kSparseBackends),
                                            ::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla),
                                            ::testing::Values(int64_t(1), int64_t(3), int64_t(16), int64_t(32),
                                                              int64_t(63), int64_t(64), int64_t(128))),
                         matrix_name);

// ---- semantics at the edges, on every CUDA sparse path ----
class SparseEdges : public ::testing::TestWithParam<std::string> {};
class SparseGraph : public ::testing::TestWithParam<std::string> {};
class SparseSupports : public ::testing::TestWithParam<std::string> {};
class SparseGolden : public ::testing::TestWithParam<std::string> {};
std::string backend_param_name(const ::testing::TestParamInfo<std::string>& info) { return info.param; }
INSTANTIATE_TEST_SUITE_P(Cuda, SparseEdges, ::testing::ValuesIn(kSparseBackends), backend_param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, SparseGraph, ::testing::ValuesIn(kSparseBackends), backend_param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, SparseSupports, ::testing::ValuesIn(kSparseBackends), backend_param_name);
INSTANTIATE_TEST_SUITE_P(Cuda, SparseGolden, ::testing::ValuesIn(kSparseBackends), backend_param_name);

// Every column invalid (negative ids) in some rows, topk_length 0 in another: out = 0, lse = -inf, and a
// sink does not turn an empty row into NaN.
TEST_P(SparseEdges, AllInvalidRowsAndEmptyLengths) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  for (KvFormat format : edge_formats(*be)) {
    SparseCaseConfig cfg;
    cfg.batch = 3;
    cfg.s_q = 2;
    cfg.h_q = 20;
    cfg.topk = 100;
    cfg.format = format;
    cfg.invalid_fraction = 1.0;
    cfg.topk_length = {0, 100, 37};
    std::mt19937_64 rng(31);
    cfg.attn_sink = random_sinks(rng, cfg.h_q);
    cfg.seed = 31;
    SparseCase c = SparseCase::generate(cfg);
    run_and_check(c, *be, true);
  }
}

// Partially invalid rows with many duplicates: few written rows, drawn with replacement.
TEST_P(SparseEdges, DuplicatesAndPartiallyInvalid) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  SparseCaseConfig cfg;
  cfg.batch = 4;
  cfg.s_q = 3;
  cfg.h_q = 128;
  cfg.topk = 700;
  cfg.num_pages = 2;
  cfg.page_size = 16;
  cfg.written_fraction = 0.2;  // 6 written rows, each indexed ~100 times
  cfg.invalid_fraction = 0.6;
  cfg.seed = 32;
  SparseCase c = SparseCase::generate(cfg);
  run_and_check(c, *be, true);
}

// Ids at or past num_pages * P: the reference rejects them on the host, a kernel cannot (the indices are on
// the device), so it treats them as "no key" (docs/spec.md section 2). The device copy gets ids past the
// cache where the host case has -1; results must equal the reference on the host case, and nothing past the
// pool is read (compute-sanitizer memcheck runs this test).
TEST_P(SparseEdges, IdsPastTheCacheAreNoKey) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  SparseCaseConfig cfg;
  cfg.batch = 2;
  cfg.s_q = 2;
  cfg.h_q = 16;
  cfg.topk = 300;
  cfg.num_pages = 3;
  cfg.page_size = 64;
  cfg.seed = 33;
  SparseCase c = SparseCase::generate(cfg);
  const int32_t num_rows = int32_t(cfg.num_pages * cfg.page_size);
  std::vector<int32_t> device_ids = c.indices;
  int replaced = 0;
  for (size_t k = 0; k < device_ids.size(); k += 5) {
    const int32_t past = replaced % 3 == 0 ? num_rows : replaced % 3 == 1 ? num_rows + 12345 : INT32_MAX;
    device_ids[k] = past;
    c.indices[k] = -1;
    ++replaced;
  }
  run_and_check(c, *be, true, [&](DeviceSparseCase& d) { d.indices.copy_from(device_ids); });
}

// out with padded rows, 16-byte aligned: each head's row 8 elements past d_v, tokens and requests 8 and 16 elements
// further apart. The Hopper epilogue's 16-byte stores (direct pieces: topk 64) and the combine (split pieces: topk
// 2048) place each row by the strides; the poisoned padding stays untouched. V3's and V4's geometry.
TEST_P(SparseEdges, PaddedOutRows) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  for (bool v4 : {false, true}) {
    for (int64_t topk : {64, 2048}) {
      SparseCaseConfig cfg;
      cfg.batch = 2;
      cfg.s_q = 2;
      cfg.h_q = 20;  // rows 20..63 of the row block: their quads exchange words but store nothing
      cfg.topk = topk;
      if (v4) cfg.dims = MlaDims::deepseek_v4();
      cfg.num_pages = std::max<int64_t>(2, (topk + 200) / cfg.page_size + 1);
      cfg.seed = uint64_t(41 + topk + (v4 ? 1 : 0));
      SparseCase c = SparseCase::generate(cfg);
      SCOPED_TRACE(describe(c) + " v4=" + std::to_string(v4));
      const int64_t d_v = cfg.dims.d_v();
      const int64_t sh = d_v + 8, ss = cfg.h_q * sh + 8, sb = cfg.s_q * ss + 16;  // strides in elements
      const size_t padded_elems = size_t(cfg.batch * sb);
      DeviceSparseCase d;
      d.upload(c, true);
      DeviceBuffer padded;
      DeviceBuffer::upload(&padded, std::vector<uint16_t>(padded_elems, kPoison16));
      d.problem.out = TensorView::strided(padded.get(), cfg.q_dtype, {cfg.batch, cfg.s_q, cfg.h_q, d_v},
                                          {sb, ss, sh, 1}, d.problem.out.device);
      const Status sup = be->supports(d.problem);
      ASSERT_TRUE(sup.ok()) << sup.to_string();
      const size_t ws_bytes = be->workspace_bytes(d.problem);
      ASSERT_GT(ws_bytes, 0u);
      d.ws.allocate(ws_bytes);
      SPARSE_CUDA(cudaMemset(d.ws.get(), kPoison, ws_bytes));
      const Status st = be->run(d.problem, Workspace{d.ws.get(), ws_bytes}, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      SPARSE_CUDA(cudaDeviceSynchronize());
      const std::vector<uint16_t> got = padded.download<uint16_t>(padded_elems);
      std::vector<uint16_t> rows;  // out's rows, packed
      std::vector<bool> in_row(padded_elems, false);
      for (int64_t b = 0; b < cfg.batch; ++b) {
        for (int64_t i = 0; i < cfg.s_q; ++i) {
          for (int64_t h = 0; h < cfg.h_q; ++h) {
            for (int64_t e = 0; e < d_v; ++e) {
              const size_t at = size_t(b * sb + i * ss + h * sh + e);
              rows.push_back(got[at]);
              in_row[at] = true;
            }
          }
        }
      }
      size_t touched = 0;
      for (size_t k = 0; k < padded_elems; ++k) touched += !in_row[k] && got[k] != kPoison16;
      EXPECT_EQ(touched, 0u) << "elements of the padding written";
      const Status ref = reference::sparse_decode(c.problem());
      ASSERT_TRUE(ref.ok()) << ref.to_string();
      EXPECT_TRUE(check_out(to_floats(rows, cfg.q_dtype), c.out_floats(), c.row_vmax(), d_v, cfg.q_dtype));
    }
  }
}

// A prefill-sized call: more query tokens than a grid's y dimension holds (65,535), s_q = 1, few heads.
TEST_P(SparseEdges, PrefillBatchOf70000Tokens) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  SparseCaseConfig cfg;
  cfg.batch = 70000;
  cfg.s_q = 1;
  cfg.h_q = 3;
  cfg.topk = 24;
  cfg.num_pages = 8;
  cfg.page_size = 64;
  cfg.seed = 34;
  SparseCase c = SparseCase::generate(cfg);
  run_and_check(c, *be, true);
}

// One request with a long top-k on few heads: the plan splits it across many CTAs, and the combine merges
// the parts and applies the sink.
TEST_P(SparseEdges, SplitRequestWithSink) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  for (int64_t h_q : {16, 128}) {
    SparseCaseConfig cfg;
    cfg.batch = 1;
    cfg.s_q = 2;
    cfg.h_q = h_q;
    cfg.topk = 4096;
    cfg.num_pages = 80;
    cfg.page_size = 64;
    cfg.format = edge_formats(*be).front();
    std::mt19937_64 rng(35);
    cfg.attn_sink = random_sinks(rng, h_q);
    cfg.topk_length = {4000};
    cfg.seed = 35 + uint64_t(h_q);
    SparseCase c = SparseCase::generate(cfg);
    run_and_check(c, *be, true);
  }
}

// Uniform lengths over about as many query tokens as CTAs, or a multiple of them: the whole-request schedule
// (smxx/host.h's sparse_schedule: no plan kernel, no split, no combine), where the kernel's own epilogue applies the
// sink. On an H100 (132 SMs): 64 x 2 tokens at 64 heads, one request per partition on either path; 395 x 2 at 16
// heads, six per partition on the Hopper path and three on the portable one (two CTAs per SM there), the last
// partition short on both; 131 x 1 at 128 heads, two per partition of 66, the last short, in CTA pairs on the Hopper
// path.
TEST_P(SparseEdges, WholeRequestScheduleWithSink) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  struct Shape {
    int64_t batch, s_q, h_q;
  };
  for (const Shape& sh : {Shape{64, 2, 64}, Shape{395, 2, 16}, Shape{131, 1, 128}}) {
    SparseCaseConfig cfg;
    cfg.batch = sh.batch;
    cfg.s_q = sh.s_q;
    cfg.h_q = sh.h_q;
    cfg.topk = 40;
    cfg.num_pages = 12;
    cfg.page_size = 64;
    cfg.format = sh.h_q < 17 ? KvFormat::kBF16 : edge_formats(*be).front();  // the Hopper path's fp8 rule
    std::mt19937_64 rng(37 + uint64_t(sh.h_q));
    cfg.attn_sink = random_sinks(rng, sh.h_q);
    cfg.seed = 37 + uint64_t(sh.h_q);
    SparseCase c = SparseCase::generate(cfg);
    run_and_check(c, *be, true);
  }
}

// topk_length over more query tokens than kCtaPlanMaxRequests (smxx/config.h): the plan kernel schedules them, not
// the decode CTAs, and splits the requests its partitions start inside (through the combine, with the sink).
TEST_P(SparseEdges, RaggedBatchThroughThePlanKernel) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  SparseCaseConfig cfg;
  cfg.batch = 2100;
  cfg.s_q = 2;
  cfg.h_q = 3;
  cfg.topk = 150;
  cfg.num_pages = 16;
  cfg.page_size = 64;
  cfg.format = KvFormat::kBF16;  // 3 heads: every path's 16-bit rows
  std::mt19937_64 rng(73);
  cfg.attn_sink = random_sinks(rng, cfg.h_q);
  std::uniform_int_distribution<int32_t> dist(0, 150);
  cfg.topk_length.resize(size_t(cfg.batch));
  for (auto& l : cfg.topk_length) l = dist(rng);
  cfg.seed = 73;
  SparseCase c = SparseCase::generate(cfg);
  run_and_check(c, *be, true);
}

// Padded page stride (pages larger than P rows): rows are located with the page stride, not P * row_bytes.
TEST_P(SparseEdges, PaddedPageStride) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  SparseCaseConfig cfg;
  cfg.batch = 3;
  cfg.s_q = 2;
  cfg.h_q = 64;
  cfg.topk = 200;
  cfg.num_pages = 9;
  cfg.page_size = 61;
  cfg.format = edge_formats(*be).front();
  cfg.seed = 36;
  SparseCase c = SparseCase::generate(cfg);
  // Re-lay the pool with 656 poisoned bytes after every page; the host case keeps the packed copy.
  const int64_t row_bytes = kv_row_bytes(cfg.format, cfg.dims.d_c, cfg.dims.d_r);
  const int64_t page_bytes = cfg.page_size * row_bytes, pad = 656;
  std::vector<uint8_t> padded(size_t(cfg.num_pages * (page_bytes + pad)), kPoison);
  for (int64_t pg = 0; pg < cfg.num_pages; ++pg)
    std::copy_n(c.cache.begin() + pg * page_bytes, page_bytes, padded.begin() + pg * (page_bytes + pad));
  DeviceBuffer padded_dev;
  DeviceBuffer::upload(&padded_dev, padded);
  run_and_check(c, *be, true, [&](DeviceSparseCase& d) {
    d.problem.kv.pages.data = padded_dev.get();
    d.problem.kv.pages.stride[0] = page_bytes + pad;
  });
}

// ---- CUDA graph: one capture, replayed with new q, indices, topk_length and cache contents ----
TEST_P(SparseGraph, ReplayWithNewInputs) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  const KvFormat format = edge_formats(*be).front();
  auto make = [format](uint64_t seed) {
    std::mt19937_64 rng(seed);
    SparseCaseConfig cfg;
    cfg.batch = 5;
    cfg.s_q = 2;
    cfg.h_q = 32;
    cfg.topk = 512;
    cfg.num_pages = 12;
    cfg.format = format;
    std::uniform_int_distribution<int32_t> len(0, 512);
    cfg.topk_length = {len(rng), len(rng), len(rng), 512, len(rng)};
    cfg.attn_sink = random_sinks(rng, cfg.h_q);
    cfg.seed = seed;
    return SparseCase::generate(cfg);
  };
  SparseCase first = make(400);
  DeviceSparseCase d;
  d.upload(first, true);
  const size_t ws_bytes = be->workspace_bytes(d.problem);
  d.ws.allocate(ws_bytes);
  cudaStream_t stream;
  SPARSE_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cudaGraph_t graph;
  SPARSE_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status st = be->run(d.problem, Workspace{d.ws.get(), ws_bytes}, stream);
  SPARSE_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st.to_string();
  cudaGraphExec_t exec;
  SPARSE_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  for (int rep = 0; rep < 3; ++rep) {
    SCOPED_TRACE("replay " + std::to_string(rep));
    SparseCase c = make(500 + uint64_t(rep));
    d.q.copy_from(c.q);
    d.cache.copy_from(c.cache);
    d.indices.copy_from(c.indices);
    d.topk_length.copy_from(c.topk_length);
    d.attn_sink.copy_from(c.attn_sink);
    d.out.copy_from(c.out);
    d.lse.copy_from(c.lse);
    SPARSE_CUDA(cudaGraphLaunch(exec, stream));
    SPARSE_CUDA(cudaStreamSynchronize(stream));
    const std::vector<uint16_t> out_dev = d.out.download<uint16_t>(c.out.size());
    const std::vector<float> lse_dev = d.lse.download<float>(c.lse.size());
    ASSERT_TRUE(reference::sparse_decode(c.problem()).ok());
    EXPECT_TRUE(check_out(to_floats(out_dev, DType::kBF16), c.out_floats(), c.row_vmax(), kDimC, DType::kBF16));
    EXPECT_TRUE(check_lse(lse_dev, c.lse));
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// ---- refusals name the field and the rule ----
TEST_P(SparseSupports, RefusesWhatItDoesNotImplement) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  SparseCaseConfig cfg;
  cfg.seed = 37;
  SparseCase c = SparseCase::generate(cfg);
  DeviceSparseCase d;
  d.upload(c, true);
  SparseDecodeProblem p = d.problem;
  p.indices.device = Device::cpu();
  Status s = be->supports(p);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("indices"), std::string::npos) << s.message();
  p = d.problem;
  p.kv.dims = MlaDims{256, 64};
  s = be->supports(p);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("d_c"), std::string::npos) << s.message();
}

// out rows that are not 16-byte aligned (the pointer, or a row stride) are refused by name: the kernels write out in
// 16-byte pieces (the Hopper epilogue since its 16-byte stores). DeviceBuffer keeps 256 bytes past its size, so the
// moved views stay inside their allocations and overlap nothing.
TEST_P(SparseSupports, RefusesOutRowsNot16ByteAligned) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  for (bool v4 : {false, true}) {
    SparseCaseConfig cfg;
    cfg.seed = 39;
    if (v4) cfg.dims = MlaDims::deepseek_v4();
    SparseCase c = SparseCase::generate(cfg);
    DeviceSparseCase d;
    d.upload(c, true);
    SCOPED_TRACE(describe(c));
    ASSERT_TRUE(be->supports(d.problem).ok()) << be->supports(d.problem).message();
    const TensorView out = d.problem.out;  // [b, s_q, h_q, d_v], contiguous
    const int64_t padded = out.shape[3] + 4;  // 8 bytes more per row: rows 8-byte, not 16-byte, aligned
    DeviceBuffer room(size_t(out.shape[0] * out.shape[1] * out.shape[2] * padded * 2));
    ASSERT_NE(room.get(), nullptr);
    SparseDecodeProblem p = d.problem;
    p.out.data = static_cast<uint8_t*>(room.get()) + 8;
    Status s = be->supports(p);
    EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
    EXPECT_NE(s.message().find("out.data"), std::string::npos) << s.message();
    p = d.problem;
    p.out.data = room.get();
    p.out.stride[2] = padded;
    p.out.stride[1] = out.shape[2] * padded;  // h_q = 16: 16-byte multiples, so only stride[2] is refused
    p.out.stride[0] = out.shape[1] * p.out.stride[1];
    s = be->supports(p);
    EXPECT_EQ(s.code(), StatusCode::kNotSupported) << s.to_string();
    EXPECT_NE(s.message().find("out.stride[2]=" + std::to_string(padded)), std::string::npos) << s.message();
  }
}

// ---- selection: the Hopper path on sm_90 for every format, except fp8 with <= 16 query rows (the portable one is
// faster there), which goes to `cuda` with the Hopper path's reason ----
TEST(SparseSelection, HopperPathChosenWhereItRuns) {
  std::string why_not;
  if (cuda_backend(&why_not, "cuda_sm90") == nullptr) GTEST_SKIP() << why_not;
  static const Registry registry = make_default_registry();
  for (int64_t h_q : {16, 17, 64}) {
    for (KvFormat format : {KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla}) {
      SparseCaseConfig cfg;
      cfg.format = format;
      cfg.h_q = h_q;
      cfg.q_dtype = format == KvFormat::kFP16 ? DType::kFP16 : DType::kBF16;
      cfg.seed = 38;
      SparseCase c = SparseCase::generate(cfg);
      DeviceSparseCase d;
      d.upload(c, true);
      const bool fp8 = format == KvFormat::kFP8E4M3 || format == KvFormat::kFP8DsMla;
      expect_hopper_selection(registry.select(d.problem), fp8 && h_q <= 16,
                              std::string(kv_format_name(format)) + " h_q=" + std::to_string(h_q));
    }
  }
}

// ---- FlashMLA's own sparse outputs (fp8_ds_mla caches), through the native API on the device: the two cases of
// flashmla/ (pages of 64 rows). flashmla_sparse/'s V3.2 and V4 cases run in test_sparse_golden.cpp ----
struct SparseGoldenInput {
  std::string dir, name;
  int64_t page_size;  // 0: from the cache's shape [num_pages, P, 1, 656]; else the cache is [num_pages, page_bytes]
  float softmax_scale;
};

std::vector<SparseGoldenInput> sparse_golden_inputs() {
  const std::string root = std::string(MLAKIT_TESTDATA_DIR);
  std::vector<SparseGoldenInput> in = {{root + "/flashmla", "sparse_b1_sq1_h128_topk256", 0, kDeepSeekSoftmaxScale},
                                       {root + "/flashmla", "sparse_b2_sq2_h64_topk128", 0, kDeepSeekSoftmaxScale}};
  return in;
}

TEST_P(SparseGolden, FlashMlaSparseCases) {
  SPARSE_BACKEND_OR_SKIP(be, GetParam());
  int cases = 0;
  for (const SparseGoldenInput& gi : sparse_golden_inputs()) {
    SCOPED_TRACE(gi.name);
    const std::string& dir = gi.dir;
    const std::string base = dir + "/" + gi.name + "/";
    NpyArray q, kv, idx, out, lse, sink;
    std::string err;
    if (!load_npy(base + "q.npy", &q, &err)) GTEST_SKIP() << "no golden data at " << dir << ": " << err;
    ASSERT_TRUE(load_npy(base + "kv_cache.npy", &kv, &err)) << err;
    ASSERT_TRUE(load_npy(base + "indices.npy", &idx, &err)) << err;
    ASSERT_TRUE(load_npy(base + "out.npy", &out, &err)) << err;
    ASSERT_TRUE(load_npy(base + "lse.npy", &lse, &err)) << err;
    const int64_t b = q.shape[0], s_q = q.shape[1], h_q = q.shape[2], topk = idx.shape[2];
    const int64_t num_pages = kv.shape[0], page = gi.page_size > 0 ? gi.page_size : kv.shape[1];
    const int64_t page_bytes = gi.page_size > 0 ? kv.shape[1] : page * ds_mla::kRowBytes;
    const bool has_sink = load_npy(base + "attn_sink.npy", &sink, &err);
    DeviceBuffer dq, dkv, didx, dsink, dout(size_t(b * s_q * h_q * kDimC * 2)), dlse(size_t(b * s_q * h_q * 4));
    DeviceBuffer::upload(&dq, q.data);
    DeviceBuffer::upload(&dkv, kv.data);
    DeviceBuffer::upload(&didx, idx.data);
    if (has_sink) DeviceBuffer::upload(&dsink, sink.data);
    SPARSE_CUDA(cudaMemset(dout.get(), kPoison, dout.bytes()));
    SPARSE_CUDA(cudaMemset(dlse.get(), kPoison, dlse.bytes()));
    SparseDecodeProblem p;
    const Device dev = Device::cuda(0);
    p.q = TensorView::contiguous(dq.get(), DType::kBF16, {b, s_q, h_q, 576}, dev);
    p.kv = KvCacheView::contiguous(dkv.get(), KvFormat::kFP8DsMla, num_pages, page, MlaDims{}, dev);
    p.kv.pages.stride[0] = page_bytes;
    p.indices = TensorView::contiguous(didx.get(), DType::kInt32, {b, s_q, topk}, dev);
    if (has_sink) p.attn_sink = TensorView::contiguous(dsink.get(), DType::kFP32, {h_q}, dev);
    p.out = TensorView::contiguous(dout.get(), DType::kBF16, {b, s_q, h_q, kDimC}, dev);
    p.lse = TensorView::contiguous(dlse.get(), DType::kFP32, {b, s_q, h_q}, dev);
    p.softmax_scale = gi.softmax_scale;
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    const Status sup = be->supports(p);
    ASSERT_TRUE(sup.ok()) << sup.to_string();
    const size_t ws_bytes = be->workspace_bytes(p);
    DeviceBuffer ws(ws_bytes);
    const Status st = be->run(p, Workspace{ws.get(), ws_bytes}, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    SPARSE_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = dout.download<uint16_t>(size_t(b * s_q * h_q * kDimC));
    const std::vector<float> got_lse = dlse.download<float>(size_t(b * s_q * h_q));

    // FlashMLA's conventions -> MLAKit's: lse [b, h_q, s_q] -> [b, s_q, h_q], +inf (empty) -> -inf; vmax per
    // (b, i) over the rows its valid ids name.
    const std::vector<int32_t> ids = idx.to_vector<int32_t>();
    const std::vector<float> golden_lse = lse.to_vector<float>();
    std::vector<float> ref_lse(got_lse.size()), vmax(got_lse.size()), row(576);
    for (int64_t bi = 0; bi < b; ++bi)
      for (int64_t i = 0; i < s_q; ++i) {
        float vm = 0.0f;
        for (int64_t k = 0; k < topk; ++k) {
          const int32_t id = ids[size_t((bi * s_q + i) * topk + k)];
          if (id < 0) continue;
          const uint8_t* bytes = kv.data.data() + (id / page) * page_bytes + (id % page) * ds_mla::kRowBytes;
          oracle_decode_row(KvFormat::kFP8DsMla, MlaDims{}, 1.0f, bytes, row.data());
          for (int64_t col = 0; col < kDimC; ++col) vm = std::max(vm, std::fabs(row[size_t(col)]));
        }
        for (int64_t h = 0; h < h_q; ++h) {
          const float g = golden_lse[size_t((bi * h_q + h) * s_q + i)];
          ref_lse[size_t((bi * s_q + i) * h_q + h)] = g == kInf ? -kInf : g;
          vmax[size_t((bi * s_q + i) * h_q + h)] = vm;
        }
      }
    const std::vector<float> ref_out = to_floats(out.data.data(), DType::kBF16, b * s_q * h_q * kDimC);
    EXPECT_TRUE(check_out(to_floats(got, DType::kBF16), ref_out, vmax, kDimC, DType::kBF16));
    EXPECT_TRUE(check_lse(got_lse, ref_lse));
    ++cases;
  }
  EXPECT_EQ(cases, 2);
}

}  // namespace
}  // namespace mlakit::test
