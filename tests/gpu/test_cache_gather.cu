// cuda gather_kv (docs/spec.md section 8) against the CPU reference, bit for bit: every format, page sizes
// 1..128, requests of random lengths including 0, P and P + 1, shuffled block tables with -1 past the used
// pages, padded layouts, and rows of arbitrary bytes (NaN, inf and subnormal codes included). Output rows
// outside every request start as a byte pattern and must keep it. Also: device-side tables pointing
// outside the cache write nothing, and the supports() rules.

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mlakit/backend.h"
#include "mlakit/kv_format.h"
#include "mlakit/problems.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr uint64_t kSeed = 0x6a7e4;
constexpr float kKvScale = 0.37f;  // not a power of two: the product rounds
constexpr int64_t kExtraOutRows = 5;
constexpr int32_t kUnusedPage = -1;
constexpr int32_t kTablePadding = INT32_MIN;


/// Random bytes of one row in `format`, avoiding nothing for 16-bit formats (NaN and inf included) and
/// giving fp8_ds_mla rows finite scales of any magnitude (not only powers of two: readers accept any).
void random_row(KvFormat format, int64_t row_bytes, std::mt19937_64& rng, uint8_t* row) {
  std::uniform_int_distribution<int> byte(0, 255);
  for (int64_t i = 0; i < row_bytes; ++i) row[i] = uint8_t(byte(rng));
  if (format == KvFormat::kFP8DsMla) {
    std::uniform_real_distribution<float> mant(1.0f, 2.0f);
    std::uniform_int_distribution<int> ex(-20, 20);
    for (int g = 0; g < ds_mla::kNumGroups; ++g) {
      const float s = std::ldexp(mant(rng), ex(rng)) * (g == 3 ? -1.0f : 1.0f);
      std::memcpy(row + ds_mla::kScaleOffset + 4 * g, &s, 4);
    }
  }
}

struct GatherConfig {
  KvFormat format = KvFormat::kBF16;
  int64_t page_size = 64;
  std::vector<int32_t> seq_lens;
  bool padded_layout = false;
  bool scale_on_device = false;
  uint64_t seed = kSeed;
  std::string describe() const {
    std::string s = std::string("format=") + kv_format_name(format) + " P=" + std::to_string(page_size) +
                    " padded=" + std::to_string(padded_layout) + " scale_on_device=" +
                    std::to_string(scale_on_device) + " seq_lens=";
    for (int32_t l : seq_lens) s += std::to_string(l) + ",";
    return s;
  }
};

struct GatherCase {
  GatherConfig cfg;
  int64_t batch = 0, num_pages = 0, row_bytes = 0, row_stride = 0, page_stride = 0;
  int64_t table_cols = 0, table_stride = 0, total_rows = 0, out_stride = 0, used_rows = 0;
  MlaDims dims{};
  std::vector<uint8_t> cache;
  std::vector<int32_t> block_table, seq_lens, cu_out;
  std::vector<uint16_t> out;

  static GatherCase make(const GatherConfig& cfg) {
    GatherCase c;
    c.cfg = cfg;
    std::mt19937_64 rng(cfg.seed);
    const int64_t P = cfg.page_size;
    c.batch = int64_t(cfg.seq_lens.size());
    c.seq_lens = cfg.seq_lens;
    c.cu_out.assign(size_t(c.batch + 1), 0);
    int64_t pages_used = 0;
    for (int64_t b = 0; b < c.batch; ++b) {
      c.cu_out[size_t(b + 1)] = c.cu_out[size_t(b)] + c.seq_lens[size_t(b)];
      pages_used += (c.seq_lens[size_t(b)] + P - 1) / P;
      c.table_cols = std::max(c.table_cols, (c.seq_lens[size_t(b)] + P - 1) / P);
    }
    c.table_cols += 2;  // -1 columns past every request
    c.table_stride = c.table_cols + 1;
    c.used_rows = c.cu_out.back();
    c.total_rows = c.used_rows + kExtraOutRows;
    c.num_pages = pages_used + 3;
    // fp8_ds_v4 (DeepSeek V4's geometry): its page layout, not a row stride, places each token (docs/spec.md 4):
    // the view's stride[1] is its 584 bytes per token, and a padded page gains one more 576-byte block.
    const bool v4 = cfg.format == KvFormat::kFP8DsV4;
    if (v4) c.dims = MlaDims::deepseek_v4();
    c.row_bytes = kv_row_bytes(cfg.format, c.dims.d_c, c.dims.d_r);
    c.row_stride = cfg.padded_layout && !v4 ? c.row_bytes + 32 : c.row_bytes;
    c.page_stride = v4 ? ds_v4::packed_page_bytes(P) + (cfg.padded_layout ? ds_v4::kTokenBytes : 0)
                       : P * c.row_stride + (cfg.padded_layout ? 64 : 0);
    c.cache.assign(size_t(c.num_pages * c.page_stride), 0xff);  // unused rows: NaN everywhere

    std::vector<int32_t> pages(size_t(c.num_pages));
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), rng);
    c.block_table.assign(size_t(c.batch * c.table_stride), kTablePadding);
    size_t next = 0;
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t L = c.seq_lens[size_t(b)];
      for (int64_t j = 0; j < c.table_cols; ++j) {
        const bool used = j < (L + P - 1) / P;
        c.block_table[size_t(b * c.table_stride + j)] = used ? pages[next++] : kUnusedPage;
      }
      for (int64_t t = 0; t < L; ++t) {
        const int64_t page = c.block_table[size_t(b * c.table_stride + t / P)];
        if (v4) {  // random token block and scale block (any UE8M0 byte, 0 and 255 included)
          uint8_t* base = &c.cache[size_t(page * c.page_stride)];
          random_row(cfg.format, ds_v4::kTokenBytes, rng, base + (t % P) * ds_v4::kTokenBytes);
          random_row(cfg.format, ds_v4::kScaleBytes, rng, base + P * ds_v4::kTokenBytes + (t % P) * ds_v4::kScaleBytes);
        } else {
          random_row(cfg.format, c.row_bytes, rng, &c.cache[size_t(page * c.page_stride + (t % P) * c.row_stride)]);
        }
      }
    }
    c.out_stride = c.dims.d_qk() + (cfg.padded_layout ? 8 : 0);
    c.out.resize(size_t(c.total_rows * c.out_stride));
    for (size_t i = 0; i < c.out.size(); ++i) c.out[i] = uint16_t(pattern_byte(i) * 257u);
    return c;
  }

  GatherKvProblem problem(const void* cache_p, const void* table, const void* lens, const void* cu, void* out_p,
                          const float* kv_scale, Device dev) const {
    GatherKvProblem p;
    p.cache.pages = TensorView::strided(cache_p, DType::kUInt8, {num_pages, cfg.page_size, row_bytes}, {page_stride, row_stride, 1}, dev);
    p.cache.format = cfg.format;
    p.cache.dims = dims;
    p.cache.kv_scale = kv_scale;
    p.cache.kv_scale_value = kv_scale ? -1.0f : kKvScale;
    p.block_table = TensorView::strided(table, DType::kInt32, {batch, table_cols}, {table_stride, 1}, dev);
    p.seq_lens = TensorView::strided(lens, DType::kInt32, {batch}, {1}, dev);
    p.cu_out = TensorView::strided(cu, DType::kInt32, {batch + 1}, {1}, dev);
    p.out = TensorView::strided(out_p, DType::kBF16, {total_rows, dims.d_qk()}, {out_stride, 1}, dev);
    return p;
  }
};

struct DeviceGather {
  DeviceBuffer cache, table, lens, cu, out, kv_scale;
  explicit DeviceGather(const GatherCase& c) {
    DeviceBuffer::upload(&cache, c.cache);
    DeviceBuffer::upload(&table, c.block_table);
    DeviceBuffer::upload(&lens, c.seq_lens);
    DeviceBuffer::upload(&cu, c.cu_out);
    DeviceBuffer::upload(&out, c.out);
    DeviceBuffer::upload(&kv_scale, std::vector<float>{kKvScale});
  }
  GatherKvProblem problem(const GatherCase& c, bool scale_on_device) const {
    return c.problem(cache.get(), table.get(), lens.get(), cu.get(), out.get(),
                     scale_on_device ? kv_scale.as<const float>() : nullptr, Device::cuda());
  }
};

/// bf16 outputs equal bit for bit; for the fp8 formats a NaN code may come out as a NaN of another payload
/// (GPU arithmetic returns its canonical NaN), so there both-NaN also counts as equal.
::testing::AssertionResult same_outputs(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want,
                                        bool nan_payload_free) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    const bool both_nan = (got[i] & 0x7fffu) > 0x7f80u && (want[i] & 0x7fffu) > 0x7f80u;
    if (nan_payload_free && both_nan) continue;
    if (bad++ == 0) first = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << got.size() << " output elements differ, first at "
                                       << first << ": got 0x" << std::hex << got[first] << ", want 0x" << want[first];
}

void check_gather(const Backend* cuda, const GatherConfig& cfg) {
  SCOPED_TRACE(cfg.describe());
  GatherCase c = GatherCase::make(cfg);
  DeviceGather dev(c);
  std::vector<float> host_scale{kKvScale};
  const GatherKvProblem hp = c.problem(c.cache.data(), c.block_table.data(), c.seq_lens.data(), c.cu_out.data(),
                                       c.out.data(), cfg.scale_on_device ? host_scale.data() : nullptr, Device::cpu());
  std::vector<uint16_t> ref_out = c.out;
  GatherKvProblem hp_ref = hp;
  hp_ref.out.data = ref_out.data();
  const Status rs = reference_backend()->run(hp_ref, nullptr);
  ASSERT_TRUE(rs.ok()) << rs.to_string();

  const GatherKvProblem dp = dev.problem(c, cfg.scale_on_device);
  ASSERT_TRUE(cuda->supports(dp).ok()) << cuda->supports(dp).to_string();
  const Status st = cuda->run(dp, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const auto got = dev.out.download<uint16_t>(c.out.size());
  const bool fp8 = cfg.format == KvFormat::kFP8E4M3 || cfg.format == KvFormat::kFP8DsMla ||
                   cfg.format == KvFormat::kFP8DsV4;
  EXPECT_TRUE(same_outputs(got, ref_out, fp8));
  // Rows past sum L_b and the row-stride gaps keep their pattern (independent of the reference).
  for (int64_t r = 0; r < c.total_rows; ++r)
    for (int64_t i = 0; i < c.out_stride; ++i) {
      const size_t k = size_t(r * c.out_stride + i);
      if (r < c.used_rows && i < c.dims.d_qk()) continue;
      ASSERT_EQ(got[k], c.out[k]) << "out row " << r << " column " << i << " was written";
    }
}

std::vector<int32_t> random_lens(uint64_t seed, int64_t batch, int64_t page_size, int32_t max_len) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> len(0, max_len);
  std::vector<int32_t> v(static_cast<size_t>(batch));
  for (auto& l : v) l = len(rng);
  // Edge lengths among them when the batch has room: 0, 1, P, P + 1.
  const int32_t edges[] = {0, 1, int32_t(page_size), int32_t(page_size + 1)};
  if (v.size() > std::size(edges))
    for (size_t i = 0; i < std::size(edges); ++i) v[i] = edges[i];
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

using GatherParam = std::tuple<KvFormat, int64_t, int64_t, bool>;
class GatherGrid : public ::testing::TestWithParam<GatherParam> {};

TEST_P(GatherGrid, BitsEqualReference) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  const auto [format, page_size, batch, padded] = GetParam();
  GatherConfig cfg;
  cfg.format = format;
  cfg.page_size = page_size;
  cfg.padded_layout = padded;
  cfg.scale_on_device = padded;
  cfg.seed = kSeed + uint64_t(page_size * 31 + batch) + uint64_t(format) * 1000;
  cfg.seq_lens = random_lens(cfg.seed, batch, page_size, 300);
  check_gather(cuda, cfg);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, GatherGrid,
    ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla,
                                         KvFormat::kFP8DsV4),
                       ::testing::Values(int64_t{1}, int64_t{2}, int64_t{16}, int64_t{64}, int64_t{128}),
                       ::testing::Values(int64_t{1}, int64_t{6}), ::testing::Bool()));

TEST(GatherSingle, OneRequestOfOneRow) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  for (const KvFormat f :
       {KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla, KvFormat::kFP8DsV4}) {
    GatherConfig cfg;
    cfg.format = f;
    cfg.seq_lens = {1};
    check_gather(cuda, cfg);
  }
}

// Device-side tables that point outside the cache: those rows are neither read nor written.
TEST(GatherGuards, BadDeviceTablesWriteNothing) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  GatherConfig cfg;
  cfg.format = KvFormat::kFP8DsMla;
  cfg.page_size = 16;
  cfg.seq_lens = {40, 48, 20};
  GatherCase c = GatherCase::make(cfg);
  const int64_t P = cfg.page_size;
  std::vector<int32_t> bad_table = c.block_table;
  bad_table[size_t(1 * c.table_stride + 1)] = -5;                              // request 1, page 1
  bad_table[size_t(1 * c.table_stride + 2)] = int32_t(c.num_pages + 3);        // request 1, page 2
  std::vector<int32_t> bad_lens = c.seq_lens;
  bad_lens[2] = int32_t(c.table_cols * P + 50);  // request 2 claims more rows than its table row holds
  GatherCase bad = c;
  bad.block_table = bad_table;
  bad.seq_lens = bad_lens;
  bad.total_rows = c.total_rows + c.table_cols * P + 50;
  bad.out.assign(size_t(bad.total_rows * bad.out_stride), 0);
  for (size_t i = 0; i < bad.out.size(); ++i) bad.out[i] = uint16_t(pattern_byte(i) * 257u);

  DeviceGather dev(bad);
  ASSERT_TRUE(cuda->run(dev.problem(bad, false), nullptr).ok());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const auto got = dev.out.download<uint16_t>(bad.out.size());

  // Expected: the good pieces gathered one request at a time by the reference, the rest untouched.
  std::vector<uint16_t> want = bad.out;
  const auto ref_piece = [&](int64_t b, int64_t begin, int32_t len) {
    std::vector<int32_t> lens{len}, cu{0, len};
    std::vector<int32_t> table(bad_table.begin() + b * c.table_stride, bad_table.begin() + (b + 1) * c.table_stride);
    GatherCase one = c;
    one.batch = 1;
    one.total_rows = len;
    GatherKvProblem p = one.problem(c.cache.data(), table.data(), lens.data(), cu.data(),
                                    want.data() + begin * bad.out_stride, nullptr, Device::cpu());
    const Status s = reference_backend()->run(p, nullptr);
    ASSERT_TRUE(s.ok()) << s.to_string();
  };
  ref_piece(0, c.cu_out[0], c.seq_lens[0]);
  ref_piece(1, c.cu_out[1], int32_t(P));                      // only page 0 of request 1 is valid
  // Request 2 claims rows past its table row: only its used pages (then -1 columns, skipped) are gathered.
  const int32_t used_pages_2 = int32_t((c.seq_lens[2] + P - 1) / P);
  ref_piece(2, c.cu_out[2], used_pages_2 * int32_t(P));
  EXPECT_TRUE(same_outputs(got, want, true));
}

TEST(GatherSupports, RejectsWhatTheKernelDoesNotHandle) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  GatherConfig cfg;
  cfg.format = KvFormat::kFP8DsMla;
  cfg.seq_lens = {10, 3};
  GatherCase c = GatherCase::make(cfg);
  DeviceGather dev(c);
  const GatherKvProblem good = dev.problem(c, false);
  ASSERT_TRUE(cuda->supports(good).ok());
  const auto expect_refused = [&](const GatherKvProblem& p, const std::string& field) {
    const Status s = cuda->supports(p);
    EXPECT_EQ(s.code(), StatusCode::kNotSupported) << field << ": " << s.to_string();
    EXPECT_NE(s.message().find(field + "="), std::string::npos) << s.message();
    EXPECT_FALSE(cuda->run(p, nullptr).ok());
  };
  {
    GatherKvProblem p = good;
    p.out.data = static_cast<uint16_t*>(p.out.data) + 4;  // 8-byte aligned, not 16
    expect_refused(p, "out.data");
  }
  {
    GatherKvProblem p = good;
    p.out.stride[0] = 580;
    expect_refused(p, "out.stride[0]");
  }
  {
    GatherKvProblem p = good;  // fp8_ds_mla rows need 16-byte steps (k_pe is read 16 bytes at a time)
    p.cache.pages.shape[0] = 1;
    p.cache.pages.stride[1] = 664;
    expect_refused(p, "cache.pages.stride[1]");
  }
  {
    GatherKvProblem p = good;  // d_qk = 102 is valid, not a multiple of the 8-element chunk
    p.cache.format = KvFormat::kBF16;
    p.cache.dims = {100, 2};
    p.cache.pages.shape[2] = kv_row_bytes(KvFormat::kBF16, 100, 2);
    p.out.shape[1] = 102;
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    expect_refused(p, "d_qk");
  }
}

}  // namespace
}  // namespace mlakit::test
