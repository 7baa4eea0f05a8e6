// DeepSeek V4 sparse decode on both CUDA paths, the portable "cuda" and the Hopper "cuda_sm90" (issue 13, docs/spec.md
// sections 2 and 4), against the CPU reference:
// V4's geometry (d_c 448 + d_r 64, V the whole 512-column row) in fp8_ds_v4, bf16 and fp8_e4m3, and the extra cache
// (a second id set over a second cache with its own page size, one softmax over both) in those formats and in
// fp8_ds_mla with V3's geometry. Head counts 1..128, s_q 1 and 2, odd page sizes and padded page strides, with and
// without topk_length, extra_topk_length and attn_sink; unwritten rows are NaN-poisoned and only ignored columns
// point at them; negative ids, ids past either cache (skipped on the device, -1 for the reference) and duplicates.
// Every case also asks for max_logits (issue 9 item 5), compared with the reference's within the LSE tolerance, on
// split rows (through the combine) and, in SparseMaxLogits, on a batch large enough that rows are not split.
// SparseFewRows covers V3.2's few-row kernel (fp8_ds_mla, q bf16, <= 16 heads; sm80/few_rows.cuh) on its own:
// split and unsplit rows, several pieces per CTA, long top-k, the extra cache and fp32 group scales that are not
// powers of two (FlashMLA's quantiser writes amax / 448; the format's readers take any float32).

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "common/compare.h"
#include "hopper_fp8_rule.h"
#include "mlakit/numeric.h"
#include "mlakit/registry.h"
#include "reference/kv_rows.h"
#include "reference/ops.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr int64_t kDimV = 512;
constexpr uint8_t kPoison = 0xFF;  // e4m3 NaN, bf16 NaN, UE8M0 255 (= +inf scale)

/// A paged cache in host memory, every byte poisoned until a row is written; pages padded past their rows.
struct HostCache {
  std::vector<uint8_t> bytes;
  KvCacheView view;
  std::vector<int32_t> written;  // ids holding a row
  HostCache(KvFormat f, MlaDims dims, int64_t num_pages, int64_t page_size, float kv_scale) {
    KvCacheView packed = KvCacheView::contiguous(nullptr, f, num_pages, page_size, dims);
    // Padded page stride: one more 576-byte block for fp8_ds_v4 (FlashMLA pads to 576 multiples), 64 bytes else.
    const int64_t stride = packed.pages.stride[0] + (f == KvFormat::kFP8DsV4 ? ds_v4::kTokenBytes : 64);
    bytes.assign(size_t(num_pages * stride), kPoison);
    view = KvCacheView::contiguous(bytes.data(), f, num_pages, page_size, dims);
    view.pages.stride[0] = stride;
    view.kv_scale_value = kv_scale;
  }
  HostCache(const HostCache&) = delete;
  HostCache& operator=(const HostCache&) = delete;
  int64_t rows() const { return view.num_pages() * view.page_size(); }
  void write(int32_t id, const std::vector<float>& row) {
    reference::encode_kv_token(view, row.data(), id / view.page_size(), id % view.page_size());
  }
  float vmax(int32_t id) const {
    std::vector<float> v(size_t(view.dims.d_qk()));
    reference::decode_kv_token(view, id / view.page_size(), id % view.page_size(), v.data());
    float m = 0.0f;
    for (int64_t c = 0; c < kDimV; ++c) m = std::max(m, std::fabs(v[size_t(c)]));
    return m;
  }
};

/// The extra-cache edge cases of issue 13 item 5, applied on top of the random case.
enum class Edge { kNone, kEmptyExtraSet, kMainAllInvalid, kExtraAllInvalid, kBothLengthsZero };

struct ExtraConfig {
  KvFormat format;
  int64_t h_q, s_q, topk, extra_topk;  // extra_topk 0: no extra cache
  int64_t page, extra_page;
  bool lengths, sink;
  uint64_t seed;
  int64_t batch = 3;
  Edge edge = Edge::kNone;
  bool odd_scales = false;         // fp8_ds_mla: every written row's four fp32 scales times a factor in [0.55, 1.9)
  DType q_dtype = DType::kBF16;    // fp16 only with V3's geometry (V4 runs in bf16)
};

std::string describe(const ExtraConfig& c) {
  return std::string(kv_format_name(c.format)) + " h_q=" + std::to_string(c.h_q) + " s_q=" + std::to_string(c.s_q) +
         " topk=" + std::to_string(c.topk) + " extra_topk=" + std::to_string(c.extra_topk) + " P=" +
         std::to_string(c.page) + "/" + std::to_string(c.extra_page) + " lengths=" + std::to_string(c.lengths) +
         " sink=" + std::to_string(c.sink) + " seed=" + std::to_string(c.seed) + " batch=" + std::to_string(c.batch) +
         " odd_scales=" + std::to_string(c.odd_scales) + " q=" + dtype_name(c.q_dtype) + " edge=" + std::to_string(int(c.edge));
}

/// Ids of one set: used columns name a written row (duplicates allowed), a negative id, or (device copy only) an id
/// at or past the cache's rows; ignored columns name unwritten (poisoned) rows.
void draw_ids(std::mt19937_64& rng, const HostCache& cache, int64_t b, int64_t s_q, int64_t topk,
              const std::vector<int32_t>& used, std::vector<int32_t>* dev, std::vector<int32_t>* host) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<size_t> pick(0, cache.written.size() - 1);
  constexpr int32_t kNegative[] = {-1, -2, INT32_MIN};
  for (int64_t bi = 0; bi < b; ++bi)
    for (int64_t i = 0; i < s_q; ++i)
      for (int64_t k = 0; k < topk; ++k) {
        int32_t d, h;
        const double u = unit(rng);
        if (k >= used[size_t(bi)]) {
          d = h = int32_t(cache.rows()) - 1;  // never written (see make_cache): poisoned
        } else if (u < 0.15) {
          d = h = kNegative[size_t(k) % 3];
        } else if (u < 0.2) {
          d = int32_t(cache.rows()) + int32_t(k % 3);  // past the cache: skipped by the kernel
          h = -1;                                        // what the reference (which rejects it) must see instead
        } else {
          d = h = cache.written[pick(rng)];
        }
        dev->push_back(d);
        host->push_back(h);
      }
}

std::unique_ptr<HostCache> make_cache(std::mt19937_64& rng, KvFormat f, MlaDims dims, int64_t rows, int64_t page) {
  const int64_t pages = (rows + page - 1) / page;
  auto c = std::make_unique<HostCache>(f, dims, pages, page, 1.0f / 32.0f);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> row(size_t(dims.d_qk()));
  for (int32_t id = 0; id + 1 < int32_t(c->rows()); ++id) {  // the last row stays poisoned
    if (u(rng) < 0.0f) continue;                              // about half the rows are written
    for (float& v : row) v = u(rng);
    c->write(id, row);
    c->written.push_back(id);
  }
  if (c->written.empty()) {
    for (float& v : row) v = u(rng);
    c->write(0, row);
    c->written.push_back(0);
  }
  return c;
}

/// fp8_ds_mla rows with scales that are not powers of two: each written row's four float32 s_g times a factor drawn
/// from [0.55, 1.9) (the values are e4m3 x s_g, whatever s_g is: docs/spec.md section 4).
void make_scales_odd(std::mt19937_64& rng, HostCache* cache) {
  std::uniform_real_distribution<float> factor(0.55f, 1.9f);
  const KvCacheView& v = cache->view;
  for (const int32_t id : cache->written) {
    uint8_t* row =
        cache->bytes.data() + (id / v.page_size()) * v.pages.stride[0] + (id % v.page_size()) * v.pages.stride[1];
    for (int g = 0; g < ds_mla::kNumGroups; ++g) {
      float s;
      std::memcpy(&s, row + ds_mla::kScaleOffset + 4 * g, 4);
      s *= factor(rng);
      std::memcpy(row + ds_mla::kScaleOffset + 4 * g, &s, 4);
    }
  }
}

void run_case(const Backend& be, const ExtraConfig& cfg) {
  SCOPED_TRACE(describe(cfg));
  std::mt19937_64 rng(cfg.seed);
  const bool v4 = cfg.format != KvFormat::kFP8DsMla;
  const MlaDims dims = v4 ? MlaDims::deepseek_v4() : MlaDims{};
  const int64_t b = cfg.batch, d_qk = dims.d_qk();
  const DType q_dtype = cfg.q_dtype;
  auto main = make_cache(rng, cfg.format, dims, std::max<int64_t>(cfg.topk, 40), cfg.page);
  std::unique_ptr<HostCache> extra;
  if (cfg.extra_topk > 0) extra = make_cache(rng, cfg.format, dims, std::max<int64_t>(cfg.extra_topk, 30), cfg.extra_page);
  if (cfg.odd_scales) {
    ASSERT_EQ(cfg.format, KvFormat::kFP8DsMla) << "odd_scales: fp8_ds_mla only";
    make_scales_odd(rng, main.get());
    if (extra) make_scales_odd(rng, extra.get());
  }

  std::uniform_int_distribution<int32_t> len_main(0, int32_t(cfg.topk)), len_extra(0, int32_t(cfg.extra_topk));
  std::vector<int32_t> topk_length(size_t(b), int32_t(cfg.topk)), extra_length(size_t(b), int32_t(cfg.extra_topk));
  if (cfg.lengths) {
    for (auto& v : topk_length) v = len_main(rng);
    for (auto& v : extra_length) v = len_extra(rng);
    topk_length[0] = 0;  // entry 0: no main key (and no key at all without an extra cache)
    if (cfg.extra_topk > 0 && b > 1) extra_length[1] = 0;
  }
  std::vector<int32_t> ids_dev, ids_host, extra_dev, extra_host;
  if (cfg.edge == Edge::kEmptyExtraSet) std::fill(extra_length.begin(), extra_length.end(), 0);
  if (cfg.edge == Edge::kBothLengthsZero) {
    std::fill(topk_length.begin(), topk_length.end(), 0);
    std::fill(extra_length.begin(), extra_length.end(), 0);
  }
  draw_ids(rng, *main, b, cfg.s_q, cfg.topk, topk_length, &ids_dev, &ids_host);
  if (extra) draw_ids(rng, *extra, b, cfg.s_q, cfg.extra_topk, extra_length, &extra_dev, &extra_host);
  if (cfg.edge == Edge::kMainAllInvalid) {  // every main id negative or past the cache: the extra set alone counts
    for (size_t k = 0; k < ids_dev.size(); ++k) {
      ids_dev[k] = k % 2 ? -1 : int32_t(main->rows()) + int32_t(k % 5);
      ids_host[k] = -1;
    }
  }
  if (cfg.edge == Edge::kExtraAllInvalid && extra) {  // every extra id negative or past its cache: the main set alone
    for (size_t k = 0; k < extra_dev.size(); ++k) {
      extra_dev[k] = k % 2 ? int32_t(extra->rows()) + int32_t(k % 7) : -1;
      extra_host[k] = -1;
    }
  }

  std::uniform_real_distribution<float> uq(-1.0f, 1.0f);
  std::vector<uint16_t> q(size_t(b * cfg.s_q * cfg.h_q * d_qk));
  for (auto& v : q) v = q_dtype == DType::kBF16 ? float_to_bf16(uq(rng)) : float_to_fp16(uq(rng));
  std::vector<float> sink;
  if (cfg.sink) {
    std::uniform_real_distribution<float> us(-2.0f, 6.0f);
    for (int64_t h = 0; h < cfg.h_q; ++h) sink.push_back(us(rng));
    sink[0] = -INFINITY;
    if (cfg.h_q > 2) sink[size_t(cfg.h_q / 2)] = INFINITY;
  }
  const int64_t rows = b * cfg.s_q * cfg.h_q;
  std::vector<uint16_t> out(size_t(rows * kDimV), 0xffff), ref_out = out;
  std::vector<float> lse(size_t(rows), NAN), ref_lse = lse, max_logits = lse, ref_max = lse;

  // ---- the problem over host memory (reference) and over device copies (backend) ----
  auto problem = [&](const void* qp, const KvCacheView& kv, const void* ip, const void* lp, const KvCacheView* ekv,
                     const void* eip, const void* elp, const void* sp, void* op, void* lsep, void* mlp, Device dev) {
    SparseDecodeProblem p;
    p.q = TensorView::contiguous(qp, q_dtype, {b, cfg.s_q, cfg.h_q, d_qk}, dev);
    p.kv = kv;
    p.indices = TensorView::contiguous(ip, DType::kInt32, {b, cfg.s_q, cfg.topk}, dev);
    if (cfg.lengths) p.topk_length = TensorView::contiguous(lp, DType::kInt32, {b}, dev);
    if (ekv != nullptr) {
      p.extra_kv = *ekv;
      p.extra_indices = TensorView::contiguous(eip, DType::kInt32, {b, cfg.s_q, cfg.extra_topk}, dev);
      if (cfg.lengths) p.extra_topk_length = TensorView::contiguous(elp, DType::kInt32, {b}, dev);
    }
    if (cfg.sink) p.attn_sink = TensorView::contiguous(sp, DType::kFP32, {cfg.h_q}, dev);
    p.out = TensorView::contiguous(op, q_dtype, {b, cfg.s_q, cfg.h_q, kDimV}, dev);
    p.lse = TensorView::contiguous(lsep, DType::kFP32, {b, cfg.s_q, cfg.h_q}, dev);
    p.max_logits = TensorView::contiguous(mlp, DType::kFP32, {b, cfg.s_q, cfg.h_q}, dev);
    p.softmax_scale = 0.0625f;
    return p;
  };
  const SparseDecodeProblem host = problem(q.data(), main->view, ids_host.data(), topk_length.data(),
                                           extra ? &extra->view : nullptr, extra_host.data(), extra_length.data(),
                                           sink.data(), ref_out.data(), ref_lse.data(), ref_max.data(), Device::cpu());
  ASSERT_TRUE(host.validate().ok()) << host.validate().to_string();
  const Status ref = reference::sparse_decode(host);
  ASSERT_TRUE(ref.ok()) << ref.to_string();

  DeviceBuffer dq, dmain, dids, dlen, dextra, deids, delen, dsink, dout, dlse, dmax;
  DeviceBuffer::upload(&dq, q);
  DeviceBuffer::upload(&dmain, main->bytes);
  DeviceBuffer::upload(&dids, ids_dev);
  DeviceBuffer::upload(&dlen, topk_length);
  DeviceBuffer::upload(&dsink, sink);
  DeviceBuffer::upload(&dout, out);
  DeviceBuffer::upload(&dlse, lse);
  DeviceBuffer::upload(&dmax, max_logits);
  const Device dev = Device::cuda(0);
  KvCacheView main_dev = main->view;
  main_dev.pages.data = dmain.get();
  main_dev.pages.device = dev;
  KvCacheView extra_dev_view;
  if (extra) {
    DeviceBuffer::upload(&dextra, extra->bytes);
    DeviceBuffer::upload(&deids, extra_dev);
    DeviceBuffer::upload(&delen, extra_length);
    extra_dev_view = extra->view;
    extra_dev_view.pages.data = dextra.get();
    extra_dev_view.pages.device = dev;
  }
  const SparseDecodeProblem p = problem(dq.get(), main_dev, dids.get(), dlen.get(), extra ? &extra_dev_view : nullptr,
                                        deids.get(), delen.get(), dsink.get(), dout.get(), dlse.get(), dmax.get(), dev);
  const Status sup = be.supports(p);
  // The one refusal that skips (hopper_fp8_rule.h; SparseExtraSelection checks the rule); any other one fails.
  if (is_fp8_row_refusal(sup)) {
    GTEST_SKIP() << be.name() << ": " << sup.message();
  }
  ASSERT_TRUE(sup.ok()) << sup.to_string();
  const size_t ws_bytes = be.workspace_bytes(p);
  DeviceBuffer ws(ws_bytes);
  CACHE_TEST_CUDA(cudaMemset(ws.get(), kPoison, ws_bytes));
  const Status st = be.run(p, Workspace{ws.get(), ws_bytes}, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<uint16_t> got = dout.download<uint16_t>(out.size());
  const std::vector<float> got_lse = dlse.download<float>(lse.size());
  const std::vector<float> got_max = dmax.download<float>(max_logits.size());

  std::vector<float> vmax;
  for (int64_t r = 0; r < b * cfg.s_q; ++r) {
    float m = 0.0f;
    for (int64_t k = 0; k < topk_length[size_t(r / cfg.s_q)]; ++k) {
      const int32_t id = ids_host[size_t(r * cfg.topk + k)];
      if (id >= 0) m = std::max(m, main->vmax(id));
    }
    for (int64_t k = 0; extra && k < extra_length[size_t(r / cfg.s_q)]; ++k) {
      const int32_t id = extra_host[size_t(r * cfg.extra_topk + k)];
      if (id >= 0) m = std::max(m, extra->vmax(id));
    }
    vmax.insert(vmax.end(), size_t(cfg.h_q), m);
  }
  EXPECT_TRUE(check_out(to_floats(got, q_dtype), to_floats(ref_out, q_dtype), vmax, kDimV, q_dtype));
  EXPECT_TRUE(check_lse(got_lse, ref_lse));
  EXPECT_TRUE(check_lse(got_max, ref_max, "max_logits"));  // -inf exactly for rows without a valid key
  if (cfg.edge == Edge::kBothLengthsZero) {  // no key at all: out = 0, lse = max_logits = -inf (docs/spec.md 2)
    for (uint16_t v : got) ASSERT_EQ(v & 0x7fffu, 0u);
    for (int64_t r = 0; r < rows; ++r) {
      ASSERT_EQ(got_lse[size_t(r)], -INFINITY);
      ASSERT_EQ(got_max[size_t(r)], -INFINITY);
    }
  }
}

using Param = std::tuple<std::string, KvFormat, int64_t>;  // backend x format x h_q
class SparseExtra : public ::testing::TestWithParam<Param> {};

TEST_P(SparseExtra, MatchesReference) {
  const auto [backend, format, h_q] = GetParam();
  std::string why;
  const Backend* be = cuda_backend(&why, backend);
  if (be == nullptr) GTEST_SKIP() << why;
  const bool v4 = format != KvFormat::kFP8DsMla;
  // (topk, extra_topk): V3's format is only run with an extra cache (the dense matrix covers it without one).
  const std::vector<std::pair<int64_t, int64_t>> sets =
      v4 ? std::vector<std::pair<int64_t, int64_t>>{{1, 0}, {63, 0}, {128, 512}, {512, 65}, {2048, 0}, {7, 1}}
         : std::vector<std::pair<int64_t, int64_t>>{{64, 33}, {512, 128}, {1, 1}};
  uint64_t seed = 900 + uint64_t(h_q) * 31 + uint64_t(format);
  for (int64_t s_q : {1, 2}) {
    for (const auto& [topk, extra_topk] : sets) {
      ++seed;
      // Page sizes: FlashMLA's V4 ones (256 main, 64 extra) and odd ones (61 and 1, 3 and 2).
      const int64_t page = seed % 3 == 0 ? 256 : seed % 3 == 1 ? 61 : 3;
      const int64_t extra_page = seed % 2 == 0 ? 64 : seed % 4 == 1 ? 1 : 2;
      run_case(*be, {format, h_q, s_q, topk, extra_topk, page, extra_page, seed % 2 == 1, seed % 4 < 2, seed});
      if (::testing::Test::HasFatalFailure() || ::testing::Test::IsSkipped()) return;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cuda, SparseExtra,
                         ::testing::Combine(::testing::Values(std::string("cuda"), std::string("cuda_sm90")),
                                            ::testing::Values(KvFormat::kFP8DsV4, KvFormat::kBF16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla),
                                            ::testing::Values(int64_t(1), int64_t(3), int64_t(16), int64_t(17),
                                                              int64_t(63), int64_t(64), int64_t(128))),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return std::get<0>(info.param) + "_" + kv_format_name(std::get<1>(info.param)) + "_h" +
                                  std::to_string(std::get<2>(info.param));
                         });

// max_logits on rows the plan does not split (1000 short requests): written by the decode kernel itself, not the
// combine. Both formats families: V3's fp8_ds_mla and V4's fp8_ds_v4 with an extra cache.
TEST(SparseMaxLogits, UnsplitRowsMatchTheReference) {
  std::string why;
  const Backend* be = cuda_backend(&why, "cuda");
  if (be == nullptr) GTEST_SKIP() << why;
  ExtraConfig v3{KvFormat::kFP8DsMla, 16, 1, 32, 0, 64, 64, true, true, 77};
  v3.batch = 1000;
  run_case(*be, v3);
  ExtraConfig v4{KvFormat::kFP8DsV4, 64, 2, 16, 16, 256, 64, true, false, 78};
  v4.batch = 500;
  run_case(*be, v4);
}

// max_logits from the Hopper path (V3 geometry, fp8_ds_mla at 64 heads: its fp8 row rule takes >= 17 rows), split
// rows (3 requests) and unsplit ones (500), with a sink and topk_length.
TEST(SparseMaxLogits, HopperPathMatchesTheReference) {
  std::string why;
  const Backend* be = cuda_backend(&why, "cuda_sm90");
  if (be == nullptr) GTEST_SKIP() << why;
  for (const int64_t batch : {int64_t(3), int64_t(500)}) {
    ExtraConfig c{KvFormat::kFP8DsMla, 64, 2, 300, 0, 61, 64, /*lengths=*/true, /*sink=*/true, uint64_t(90 + batch)};
    c.batch = batch;
    run_case(*be, c);
  }
}

// Issue 13 item 5 on the GPU: an empty extra set (extra_topk_length 0), every main id invalid (negative or past the
// cache), every extra id invalid, both lengths zero; each format, split and unsplit rows, on both CUDA paths.
TEST(SparseExtraEdges, EmptyAndInvalidSets) {
  for (const std::string backend : {"cuda", "cuda_sm90"}) {
    std::string why;
    const Backend* be = cuda_backend(&why, backend);
    if (be == nullptr) {
      std::printf("[ SKIPPED  ] %s: %s\n", backend.c_str(), why.c_str());
      continue;
    }
    uint64_t seed = 4000;
    for (const KvFormat f : {KvFormat::kFP8DsV4, KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla}) {
      for (const Edge e : {Edge::kEmptyExtraSet, Edge::kMainAllInvalid, Edge::kExtraAllInvalid, Edge::kBothLengthsZero}) {
        for (const int64_t batch : {int64_t(3), int64_t(400)}) {
          ExtraConfig c{f, 64, 2, 96, 70, 61, 64, /*lengths=*/true, /*sink=*/e != Edge::kBothLengthsZero, ++seed};
          c.batch = batch;
          c.edge = e;
          run_case(*be, c);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
  }
}

// The same edges and max_logits at few heads on the portable path (V4's 16-head shards run there on sm_90 too, and
// kernels that hold all of a token's rows in one CTA take other code paths below 17 rows): fp8_ds_v4 at 3 and 16
// heads, split (3 requests) and unsplit (400) rows.
TEST(SparseExtraEdges, FewHeadsOnThePortablePath) {
  std::string why;
  const Backend* be = cuda_backend(&why, "cuda");
  if (be == nullptr) GTEST_SKIP() << why;
  uint64_t seed = 4100;
  for (const int64_t h_q : {int64_t(3), int64_t(16)}) {
    for (const Edge e : {Edge::kNone, Edge::kEmptyExtraSet, Edge::kMainAllInvalid, Edge::kExtraAllInvalid,
                         Edge::kBothLengthsZero}) {
      for (const int64_t batch : {int64_t(3), int64_t(400)}) {
        ExtraConfig c{KvFormat::kFP8DsV4, h_q, 2, 96, 70, 61, 64, /*lengths=*/true,
                      /*sink=*/e != Edge::kBothLengthsZero, ++seed};
        c.batch = batch;
        c.edge = e;
        run_case(*be, c);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

// V3.2's few-row kernel (sm80/few_rows.cuh, decode_few_rows_dsmla: fp8_ds_mla, q bf16, <= 16 heads; issue 9's
// 16-head shards), against the reference with out, lse and max_logits checked: 1, 3 and 16 heads; split rows (3
// entries x 2 tokens over every SM's CTAs: pieces of one or two tiles, each partition's first and last request) and
// unsplit ones (the whole-request schedule, 790 or 528 tokens: on an H100 or H200, 3 or 2 pieces per CTA, so the rings
// restart per piece; and the CTA plan with topk_length); top-k 2048 (64 tiles: the two raw stages and three scale
// slots wrap many times) and short ones; sinks, topk_length, the extra cache (V3's geometry has one too), every main
// id invalid, every extra id invalid, both lengths zero; fp32 scales that are not powers of two, where the kernel's rounding (P x s to bf16)
// differs from the portable kernel's (e4m3 x s to bf16). fp16 q takes the portable kernel: checked here with the
// writer's (power-of-two) scales only, since with other scales its rounding of e4m3 x s to fp16 before the mma moved
// lse and max_logits by up to 4.8e-4 on the H100 (2026-11-27), past the LSE tolerance (docs/spec.md, section 10).
TEST(SparseFewRows, DsMlaSplitUnsplitSinksMaxLogits) {
  std::string why;
  const Backend* be = cuda_backend(&why, "cuda");
  if (be == nullptr) GTEST_SKIP() << why;
  uint64_t seed = 4200;
  for (const int64_t h_q : {int64_t(1), int64_t(3), int64_t(16)}) {
    struct Shape {
      int64_t batch, topk, extra_topk;
      bool lengths;
      Edge edge;
    };
    const Shape shapes[] = {
        {3, 2048, 0, true, Edge::kNone},            // split rows, long top-k, topk_length
        {3, 2048, 0, false, Edge::kNone},           // split rows, every column
        {395, 96, 0, false, Edge::kNone},           // whole requests: 3 pieces per CTA (132 SMs x 2 CTAs), 3 tiles
        {264, 300, 0, false, Edge::kNone},          // whole requests: 2 pieces per CTA (132 SMs x 2), 10 tiles each
        {400, 96, 0, true, Edge::kNone},            // the CTA plan over ragged lengths: split and unsplit rows
        {3, 200, 70, true, Edge::kNone},            // the extra cache, split
        {300, 64, 33, true, Edge::kMainAllInvalid}, // the extra set alone
        {300, 64, 33, true, Edge::kExtraAllInvalid},  // the main set alone
        {3, 96, 0, true, Edge::kBothLengthsZero},   // no key at all: out 0, lse and max_logits -inf
    };
    for (const Shape& sh : shapes) {
      for (const bool odd : {false, true}) {
        ++seed;
        const int64_t page = seed % 3 == 0 ? 64 : seed % 3 == 1 ? 61 : 3;
        ExtraConfig c{KvFormat::kFP8DsMla, h_q, 2, sh.topk, sh.extra_topk, page, seed % 2 == 0 ? 64 : 1, sh.lengths,
                      /*sink=*/sh.edge != Edge::kBothLengthsZero, seed};
        c.batch = sh.batch;
        c.edge = sh.edge;
        c.odd_scales = odd;
        run_case(*be, c);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
    // fp16 q: the portable kernel (the few-row kernel is bf16 only), split and unsplit.
    for (const int64_t batch : {int64_t(3), int64_t(400)}) {
      ExtraConfig c{KvFormat::kFP8DsMla, h_q, 2, 300, 0, 61, 64, /*lengths=*/true, /*sink=*/true, ++seed};
      c.batch = batch;
      c.q_dtype = DType::kFP16;
      run_case(*be, c);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Selection on sm_90 (issue 13): V4's geometry, fp8_ds_v4 and the extra cache go to the Hopper path from 17 query rows
// per request; below, fp8 caches go to `cuda` with the Hopper path's reason named, bf16 stays on the Hopper path.
TEST(SparseExtraSelection, HopperPathTakesV4AndTheExtraCache) {
  std::string why;
  if (cuda_backend(&why, "cuda_sm90") == nullptr) GTEST_SKIP() << why;
  static const Registry registry = make_default_registry();
  std::mt19937_64 rng(5);
  const Device dev = Device::cuda(0);
  for (const KvFormat f : {KvFormat::kFP8DsV4, KvFormat::kBF16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla}) {
    const bool v4 = f != KvFormat::kFP8DsMla;
    const MlaDims dims = v4 ? MlaDims::deepseek_v4() : MlaDims{};
    const int64_t d_qk = dims.d_qk();
    auto cache = make_cache(rng, f, dims, 64, 64);
    DeviceBuffer dkv(cache->bytes.size()), dids(64 * 4), dext(64 * 4);
    for (const int64_t h_q : {int64_t(16), int64_t(17), int64_t(64)}) {
      DeviceBuffer dq(size_t(2 * h_q * d_qk * 2)), dout(size_t(2 * h_q * kDimV * 2));
      SparseDecodeProblem p;
      p.q = TensorView::contiguous(dq.get(), DType::kBF16, {2, 1, h_q, d_qk}, dev);
      p.kv = cache->view;
      p.kv.pages.data = dkv.get();
      p.kv.pages.device = dev;
      p.indices = TensorView::contiguous(dids.get(), DType::kInt32, {2, 1, 32}, dev);
      p.extra_kv = p.kv;  // the same pool as a second cache: valid, and what selection must see
      p.extra_indices = TensorView::contiguous(dext.get(), DType::kInt32, {2, 1, 16}, dev);
      p.out = TensorView::contiguous(dout.get(), DType::kBF16, {2, 1, h_q, kDimV}, dev);
      p.softmax_scale = 0.0625f;
      ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
      expect_hopper_selection(registry.select(p), f != KvFormat::kBF16 && h_q <= 16,
                              std::string(kv_format_name(f)) + " h_q=" + std::to_string(h_q));
    }
  }
}

}  // namespace
}  // namespace mlakit::test
