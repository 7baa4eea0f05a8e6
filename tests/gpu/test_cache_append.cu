// cuda append_kv (docs/spec.md sections 4 and 7) against the CPU reference, byte for byte: every format, input
// dtype, page size 1..128, token counts 0, 1, 7, 300 with duplicate-free random slots and ~20% padded
// (negative) slots, contiguous and padded cache/input layouts; fused RoPE (interleaved and neox) on k_pe
// and q_pe with and without the fp8 copy of q; device-side scale pointer replayed with a new value;
// device-side slots and positions outside their ranges; FlashMLA's own fp8_ds_mla bytes; and the
// supports() rules. The cache is filled with a byte pattern first and the whole buffer is compared, so a
// byte written outside the targeted rows fails; a second, reference-independent check walks every byte
// outside the written rows and compares it with the pattern.

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/npy.h"
#include "mlakit/backend.h"
#include "mlakit/kv_format.h"
#include "mlakit/problems.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr uint64_t kSeed = 0x4a11e4d;
constexpr int64_t kMaxPos = 1024;          // rows of the RoPE table
constexpr float kKvScale = 1.0f / 64.0f;  // fp8_e4m3: |x| <= 2 becomes <= 128, inside +-448
constexpr float kQScale = 1.0f / 32.0f;
constexpr float kValueRange = 2.0f;
constexpr double kPaddedFraction = 0.2;
constexpr int64_t kNegativeSlots[] = {-1, -2, -977, INT64_MIN};

enum class QMode { kNone, kRope, kRopeFp8, kFp8Only };
const char* qmode_name(QMode m) {
  switch (m) {
    case QMode::kNone: return "no_q";
    case QMode::kRope: return "q_rope";
    case QMode::kRopeFp8: return "q_rope_fp8";
    case QMode::kFp8Only: return "q_fp8_only";
  }
  return "?";
}

struct AppendConfig {
  KvFormat format = KvFormat::kBF16;
  DType in_dtype = DType::kBF16;
  int64_t page_size = 64;
  int64_t tokens = 7;
  bool padded_layout = false;  // row/page/tensor strides with gaps (checked untouched)
  MlaDims dims{};
  bool rope = false;
  RopeStyle style = RopeStyle::kInterleaved;
  QMode qmode = QMode::kNone;
  DType q_dtype = DType::kBF16;
  int64_t h_q = 3;
  bool scale_on_device = false;  // kv_scale and q_scale through device pointers
  uint64_t seed = kSeed;

  std::string describe() const {
    return std::string("format=") + kv_format_name(format) + " in=" + dtype_name(in_dtype) +
           " P=" + std::to_string(page_size) + " T=" + std::to_string(tokens) +
           " padded=" + std::to_string(padded_layout) + " d_c=" + std::to_string(dims.d_c) +
           " d_r=" + std::to_string(dims.d_r) + " rope=" + (rope ? rope_style_name(style) : "none") + " " +
           qmode_name(qmode) + " q=" + dtype_name(q_dtype) + " h_q=" + std::to_string(h_q) +
           " scale_on_device=" + std::to_string(scale_on_device) + " seed=" + std::to_string(seed);
  }
};


int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

/// Host buffers of one append case and the problem over them (host or device copies).
struct AppendCase {
  AppendConfig cfg;
  int64_t num_pages = 0, row_stride = 0, page_stride = 0, capacity = 0;
  int64_t kv_c_stride = 0, k_pe_stride = 0, q_stride_h = 0, q_stride_t = 0;
  std::vector<uint8_t> cache, kv_c, k_pe, q, q_fp8;
  std::vector<int64_t> slots, positions;
  std::vector<float> cos_sin;

  int64_t d_qk() const { return cfg.dims.d_qk(); }
  bool has_q() const { return cfg.qmode != QMode::kNone; }
  bool has_q_fp8() const { return cfg.qmode == QMode::kRopeFp8 || cfg.qmode == QMode::kFp8Only; }

  static AppendCase make(const AppendConfig& cfg) {
    AppendCase c;
    c.cfg = cfg;
    std::mt19937_64 rng(cfg.seed);
    const int64_t T = cfg.tokens, P = cfg.page_size, d_c = cfg.dims.d_c, d_r = cfg.dims.d_r;
    const int64_t row_bytes = kv_row_bytes(cfg.format, cfg.dims.d_c, cfg.dims.d_r);
    c.num_pages = std::max<int64_t>(2, (T * 5 / 4 + P - 1) / P + 1);
    c.capacity = c.num_pages * P;
    // fp8_ds_v4: the view's stride[1] is its 584 bytes per token; its page layout places the tokens (pages padded to
    // 576-byte multiples, one block more when padded).
    const bool v4 = cfg.format == KvFormat::kFP8DsV4;
    c.row_stride = cfg.padded_layout && !v4 ? round_up(row_bytes, 16) + 16 : row_bytes;
    c.page_stride = v4 ? ds_v4::packed_page_bytes(P) + (cfg.padded_layout ? ds_v4::kTokenBytes : 0)
                       : P * c.row_stride + (cfg.padded_layout ? 48 : 0);
    c.cache = pattern_bytes(size_t(c.num_pages * c.page_stride));

    // Inputs: kv_c rows keep 16-byte alignment (8 elements of gap), k_pe gets an odd gap (no rule).
    c.kv_c_stride = d_c + (cfg.padded_layout ? 8 : 0);
    c.k_pe_stride = d_r + (cfg.padded_layout ? 3 : 0);
    std::vector<float> kv = random_floats(rng, size_t(T * c.kv_c_stride), kValueRange);
    std::vector<float> pe = random_floats(rng, size_t(T * c.k_pe_stride), kValueRange);
    if (cfg.format == KvFormat::kFP8DsMla || v4) {
      // Per-group magnitudes 2^-12 .. 2^12 and some all-zero groups: every scale path, the 1e-4 floor too.
      std::uniform_int_distribution<int> exp_dist(-12, 12);
      const int groups = v4 ? ds_v4::kNumGroups : ds_mla::kNumGroups;
      const int group_size = v4 ? ds_v4::kGroupSize : ds_mla::kGroupSize;
      for (int64_t t = 0; t < T; ++t)
        for (int g = 0; g < groups; ++g) {
          const int e = exp_dist(rng);
          for (int i = 0; i < group_size; ++i) {
            float& x = kv[size_t(t * c.kv_c_stride + g * group_size + i)];
            x = (e == 12) ? 0.0f : std::ldexp(x, e);
          }
        }
    }
    if (cfg.format == KvFormat::kFP8E4M3 && T > 0) {
      // A few values beyond 448 * kv_scale: the satfinite rule.
      std::uniform_int_distribution<int64_t> pick(0, T * d_c - 1);
      for (int k = 0; k < 8; ++k) {
        const int64_t i = pick(rng);
        kv[size_t((i / d_c) * c.kv_c_stride + i % d_c)] = (k % 2 ? -1.0f : 1.0f) * 1000.0f;
      }
    }
    c.kv_c = encode_values(kv, cfg.in_dtype);
    c.k_pe = encode_values(pe, cfg.in_dtype);

    // Duplicate-free slots over the whole cache, then about 20% padding tokens.
    std::vector<int64_t> all(size_t(c.capacity));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    c.slots.assign(all.begin(), all.begin() + T);
    std::bernoulli_distribution padded(kPaddedFraction);
    for (int64_t t = 0; t < T; ++t)
      if (padded(rng)) c.slots[size_t(t)] = kNegativeSlots[size_t(t) % std::size(kNegativeSlots)];

    if (cfg.rope) {
      std::uniform_int_distribution<int64_t> pos(0, kMaxPos - 1);
      c.positions.resize(size_t(T));
      for (auto& p : c.positions) p = pos(rng);
      c.cos_sin = rope_table(kMaxPos, d_r);
    }
    if (c.has_q()) {
      // q rows 16-byte aligned (q_fp8 reads q in 8-element chunks), with a gap when padded.
      c.q_stride_h = round_up(d_qk_of(cfg), 8) + (cfg.padded_layout ? 8 : 0);
      c.q_stride_t = cfg.h_q * c.q_stride_h + (cfg.padded_layout ? 16 : 0);
      c.q = encode_values(random_floats(rng, size_t(T * c.q_stride_t), kValueRange), cfg.q_dtype);
      if (c.has_q_fp8()) c.q_fp8 = pattern_bytes(size_t(T * c.q_stride_t));
    }
    return c;
  }
  static int64_t d_qk_of(const AppendConfig& cfg) { return cfg.dims.d_qk(); }

  /// Pointers the problem is built over: this object's vectors, or device copies of them.
  struct Buffers {
    const void *kv_c, *k_pe, *slots, *positions, *cos_sin;
    void *cache, *q, *q_fp8;
    const float *kv_scale, *q_scale;
  };
  Buffers host_buffers() {
    return {kv_c.data(), k_pe.data(), slots.data(), positions.data(), cos_sin.data(),
            cache.data(), q.data(), q_fp8.data(), nullptr, nullptr};
  }

  AppendKvProblem problem(const Buffers& b, Device dev) const {
    const int64_t T = cfg.tokens;
    AppendKvProblem p;
    p.kv_c = TensorView::strided(b.kv_c, cfg.in_dtype, {T, cfg.dims.d_c}, {kv_c_stride, 1}, dev);
    p.k_pe = TensorView::strided(b.k_pe, cfg.in_dtype, {T, cfg.dims.d_r}, {k_pe_stride, 1}, dev);
    p.slot_mapping = TensorView::strided(b.slots, DType::kInt64, {T}, {1}, dev);
    p.cache.pages = TensorView::strided(b.cache, DType::kUInt8, {num_pages, cfg.page_size, kv_row_bytes(cfg.format, cfg.dims.d_c, cfg.dims.d_r)},
                         {page_stride, row_stride, 1}, dev);
    p.cache.format = cfg.format;
    p.cache.dims = cfg.dims;
    p.cache.kv_scale = b.kv_scale;
    p.cache.kv_scale_value = b.kv_scale ? -1.0f : kKvScale;  // a wrong value, so using it would show
    if (cfg.rope) {
      p.positions = TensorView::strided(b.positions, DType::kInt64, {T}, {1}, dev);
      p.cos_sin = TensorView::strided(b.cos_sin, DType::kFP32, {kMaxPos, cfg.dims.d_r}, {cfg.dims.d_r, 1}, dev);
      p.rope_style = cfg.style;
    }
    if (has_q()) {
      p.q = TensorView::strided(b.q, cfg.q_dtype, {T, cfg.h_q, d_qk()}, {q_stride_t, q_stride_h, 1}, dev);
      if (has_q_fp8()) {
        p.q_fp8 = TensorView::strided(b.q_fp8, DType::kFP8E4M3, {T, cfg.h_q, d_qk()}, {q_stride_t, q_stride_h, 1}, dev);
        p.q_scale = b.q_scale;
        p.q_scale_value = b.q_scale ? -1.0f : kQScale;
      }
    }
    return p;
  }
};

/// Device copies of a case's buffers.
struct DeviceCase {
  DeviceBuffer kv_c, k_pe, slots, positions, cos_sin, cache, q, q_fp8, kv_scale, q_scale;
  explicit DeviceCase(const AppendCase& c) {
    DeviceBuffer::upload(&kv_c, c.kv_c);
    DeviceBuffer::upload(&k_pe, c.k_pe);
    DeviceBuffer::upload(&slots, c.slots);
    DeviceBuffer::upload(&positions, c.positions);
    DeviceBuffer::upload(&cos_sin, c.cos_sin);
    DeviceBuffer::upload(&cache, c.cache);
    DeviceBuffer::upload(&q, c.q);
    DeviceBuffer::upload(&q_fp8, c.q_fp8);
    DeviceBuffer::upload(&kv_scale, std::vector<float>{kKvScale});
    DeviceBuffer::upload(&q_scale, std::vector<float>{kQScale});
  }
  AppendCase::Buffers buffers(bool scale_on_device) const {
    return {kv_c.get(), k_pe.get(), slots.get(), positions.get(), cos_sin.get(), cache.get(), q.get(), q_fp8.get(),
            scale_on_device ? kv_scale.as<const float>() : nullptr, scale_on_device ? q_scale.as<const float>() : nullptr};
  }
};

/// Every byte outside the rows of valid slots still holds the pattern (independent of the reference).
::testing::AssertionResult untouched_outside_rows(const AppendCase& c, const std::vector<uint8_t>& cache) {
  const int64_t row_bytes = kv_row_bytes(c.cfg.format, c.cfg.dims.d_c, c.cfg.dims.d_r);
  std::vector<bool> written(cache.size(), false);
  const int64_t P = c.cfg.page_size;
  for (int64_t slot : c.slots) {
    if (slot < 0 || slot >= c.capacity) continue;
    const int64_t page = (slot / P) * c.page_stride;
    if (c.cfg.format == KvFormat::kFP8DsV4) {  // the token block and the scale block
      for (int64_t i = 0; i < ds_v4::kTokenBytes; ++i) written[size_t(page + (slot % P) * ds_v4::kTokenBytes + i)] = true;
      for (int64_t i = 0; i < ds_v4::kScaleBytes; ++i) {
        written[size_t(page + P * ds_v4::kTokenBytes + (slot % P) * ds_v4::kScaleBytes + i)] = true;
      }
      continue;
    }
    const int64_t base = page + (slot % P) * c.row_stride;
    for (int64_t i = 0; i < row_bytes; ++i) written[size_t(base + i)] = true;
  }
  for (size_t i = 0; i < cache.size(); ++i) {
    if (!written[i] && cache[i] != pattern_byte(i))
      return ::testing::AssertionFailure() << "cache byte " << i << " outside every written row changed";
  }
  return ::testing::AssertionSuccess();
}

/// Runs the case on the reference (host copy) and the cuda backend and compares every output byte.
void check_case(const Backend* cuda, const AppendConfig& cfg) {
  SCOPED_TRACE(cfg.describe());
  AppendCase ref = AppendCase::make(cfg);
  DeviceCase dev(ref);
  ASSERT_NE(dev.cache.get(), nullptr);

  std::vector<float> host_kv_scale{kKvScale}, host_q_scale{kQScale};
  AppendCase::Buffers hb = ref.host_buffers();
  if (cfg.scale_on_device) {  // the reference reads the same scale through a host pointer
    hb.kv_scale = host_kv_scale.data();
    hb.q_scale = host_q_scale.data();
  }
  const Status rs = reference_backend()->run(ref.problem(hb, Device::cpu()), nullptr);
  ASSERT_TRUE(rs.ok()) << "reference: " << rs.to_string();

  const AppendKvProblem dp = ref.problem(dev.buffers(cfg.scale_on_device), Device::cuda());
  const Status sup = cuda->supports(dp);
  ASSERT_TRUE(sup.ok()) << sup.to_string();
  const Status st = cuda->run(dp, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  CACHE_TEST_CUDA(cudaDeviceSynchronize());

  const auto cache = dev.cache.download<uint8_t>(ref.cache.size());
  EXPECT_TRUE(same_bytes(cache, ref.cache, "cache"));
  EXPECT_TRUE(untouched_outside_rows(ref, cache));
  if (ref.has_q()) EXPECT_TRUE(same_bytes(dev.q.download<uint8_t>(ref.q.size()), ref.q, "q"));
  if (ref.has_q_fp8()) EXPECT_TRUE(same_bytes(dev.q_fp8.download<uint8_t>(ref.q_fp8.size()), ref.q_fp8, "q_fp8"));
}

// ---- plain append: format x input dtype x page size x T x layout ----

using PlainParam = std::tuple<KvFormat, DType, int64_t, int64_t, bool>;
class AppendPlain : public ::testing::TestWithParam<PlainParam> {};

TEST_P(AppendPlain, BytesEqualReference) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  const auto [format, in_dtype, page_size, tokens, padded] = GetParam();
  AppendConfig cfg;
  cfg.format = format;
  cfg.in_dtype = in_dtype;
  cfg.page_size = page_size;
  cfg.tokens = tokens;
  cfg.padded_layout = padded;
  if (format == KvFormat::kFP8DsV4) cfg.dims = MlaDims::deepseek_v4();
  cfg.scale_on_device = (tokens % 2) == 1;  // both scale paths over the grid
  cfg.seed = kSeed + uint64_t(page_size * 1000 + tokens) + uint64_t(format) * 7 + uint64_t(in_dtype) * 13;
  check_case(cuda, cfg);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, AppendPlain,
    ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla,
                                         KvFormat::kFP8DsV4),
                       ::testing::Values(DType::kBF16, DType::kFP16, DType::kFP32),
                       ::testing::Values(int64_t{1}, int64_t{2}, int64_t{16}, int64_t{64}, int64_t{128}),
                       ::testing::Values(int64_t{0}, int64_t{1}, int64_t{7}, int64_t{300}),
                       ::testing::Bool()));

// ---- other geometries (the kernels take any d_c multiple of 8 and any even d_r) ----

using GeometryParam = std::tuple<KvFormat, std::pair<int, int>, bool>;
class AppendGeometry : public ::testing::TestWithParam<GeometryParam> {};

TEST_P(AppendGeometry, BytesEqualReference) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  const auto [format, dims, rope] = GetParam();
  AppendConfig cfg;
  cfg.format = format;
  cfg.dims = {dims.first, dims.second};
  cfg.tokens = 45;
  cfg.page_size = 16;
  cfg.padded_layout = true;  // rows rounded up to 16 bytes: odd d_qk gives rows of any length
  cfg.rope = rope && dims.second > 0;
  cfg.style = RopeStyle::kNeox;
  cfg.qmode = cfg.rope ? QMode::kRopeFp8 : QMode::kFp8Only;
  cfg.seed = kSeed + uint64_t(dims.first + dims.second);
  check_case(cuda, cfg);
}

INSTANTIATE_TEST_SUITE_P(
    Dims, AppendGeometry,
    ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3),
                       ::testing::Values(std::pair{256, 32}, std::pair{1024, 128}, std::pair{64, 0}, std::pair{8, 2},
                                         std::pair{1536, 66}),
                       ::testing::Bool()));

// ---- fused RoPE + append, q in place, optional fp8 q ----

using FusedParam = std::tuple<KvFormat, RopeStyle, QMode, DType, int64_t>;
class AppendFused : public ::testing::TestWithParam<FusedParam> {};

TEST_P(AppendFused, BytesEqualReference) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  const auto [format, style, qmode, q_dtype, tokens] = GetParam();
  AppendConfig cfg;
  cfg.format = format;
  if (format == KvFormat::kFP8DsV4) cfg.dims = MlaDims::deepseek_v4();
  cfg.in_dtype = tokens % 2 ? DType::kBF16 : DType::kFP32;
  cfg.page_size = tokens % 2 ? 64 : 32;
  cfg.tokens = tokens;
  cfg.padded_layout = tokens > 10;
  cfg.rope = qmode != QMode::kFp8Only;
  cfg.style = style;
  cfg.qmode = qmode;
  cfg.q_dtype = q_dtype;
  cfg.h_q = tokens > 100 ? 16 : 5;
  cfg.scale_on_device = style == RopeStyle::kNeox;
  cfg.seed = kSeed ^ (uint64_t(tokens) << 8) ^ (uint64_t(format) << 4) ^ uint64_t(qmode);
  check_case(cuda, cfg);
}

INSTANTIATE_TEST_SUITE_P(
    Grid, AppendFused,
    ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla,
                                         KvFormat::kFP8DsV4),
                       ::testing::Values(RopeStyle::kInterleaved, RopeStyle::kNeox),
                       ::testing::Values(QMode::kNone, QMode::kRope, QMode::kRopeFp8, QMode::kFp8Only),
                       ::testing::Values(DType::kBF16, DType::kFP16),
                       ::testing::Values(int64_t{1}, int64_t{45}, int64_t{130})));

// ---- device-side scale: a second call with a new scale behind the same pointer (CUDA-graph replay) ----

TEST(AppendScale, DevicePointerIsReadAtRunTime) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  AppendConfig cfg;
  cfg.format = KvFormat::kFP8E4M3;
  cfg.tokens = 64;
  cfg.qmode = QMode::kFp8Only;
  cfg.scale_on_device = true;
  AppendCase ref = AppendCase::make(cfg);
  DeviceCase dev(ref);
  const AppendKvProblem dp = ref.problem(dev.buffers(true), Device::cuda());
  ASSERT_TRUE(cuda->run(dp, nullptr).ok());
  constexpr float kNewKvScale = 0.75f, kNewQScale = 3.0f;  // not powers of two: exercises the division
  dev.kv_scale.copy_from(std::vector<float>{kNewKvScale});
  dev.q_scale.copy_from(std::vector<float>{kNewQScale});
  ASSERT_TRUE(cuda->run(dp, nullptr).ok());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());

  std::vector<float> kv_scale{kNewKvScale}, q_scale{kNewQScale};
  AppendCase::Buffers hb = ref.host_buffers();
  hb.kv_scale = kv_scale.data();
  hb.q_scale = q_scale.data();
  ASSERT_TRUE(reference_backend()->run(ref.problem(hb, Device::cpu()), nullptr).ok());
  EXPECT_TRUE(same_bytes(dev.cache.download<uint8_t>(ref.cache.size()), ref.cache, "cache"));
  EXPECT_TRUE(same_bytes(dev.q_fp8.download<uint8_t>(ref.q_fp8.size()), ref.q_fp8, "q_fp8"));
}

// ---- device-side guards: slots >= capacity and positions outside the table write nothing ----

TEST(AppendGuards, OutOfRangeSlotsAndPositionsAreSkipped) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  for (const KvFormat format : {KvFormat::kBF16, KvFormat::kFP8DsMla}) {
    AppendConfig cfg;
    cfg.format = format;
    cfg.tokens = 96;
    cfg.page_size = 8;
    cfg.rope = true;
    cfg.qmode = QMode::kRopeFp8;
    SCOPED_TRACE(cfg.describe());
    AppendCase ref = AppendCase::make(cfg);
    AppendCase bad = ref;  // the device sees out-of-range values where the reference sees skips
    const int64_t bad_slots[] = {ref.capacity, ref.capacity + 5, INT64_MAX};
    const int64_t bad_positions[] = {-1, kMaxPos, INT64_MAX, INT64_MIN};
    for (int64_t t = 0; t < cfg.tokens; ++t) {
      if (t % 7 == 3) {
        bad.slots[size_t(t)] = bad_slots[size_t(t) % std::size(bad_slots)];
        ref.slots[size_t(t)] = -1;
      }
      if (t % 11 == 5) {
        bad.positions[size_t(t)] = bad_positions[size_t(t) % std::size(bad_positions)];
        // Expected: no cache write, q unrotated (position 0 is the identity: row 0 is [1 | 0]), q_fp8 of q.
        ref.slots[size_t(t)] = -1;
        ref.positions[size_t(t)] = 0;
      }
    }
    DeviceCase dev(bad);
    ASSERT_TRUE(cuda->run(bad.problem(dev.buffers(false), Device::cuda()), nullptr).ok());
    CACHE_TEST_CUDA(cudaDeviceSynchronize());
    ASSERT_TRUE(reference_backend()->run(ref.problem(ref.host_buffers(), Device::cpu()), nullptr).ok());
    const auto cache = dev.cache.download<uint8_t>(ref.cache.size());
    EXPECT_TRUE(same_bytes(cache, ref.cache, "cache"));
    EXPECT_TRUE(untouched_outside_rows(ref, cache));
    EXPECT_TRUE(same_bytes(dev.q.download<uint8_t>(ref.q.size()), ref.q, "q"));
    EXPECT_TRUE(same_bytes(dev.q_fp8.download<uint8_t>(ref.q_fp8.size()), ref.q_fp8, "q_fp8"));
  }
}

// ---- FlashMLA's fp8_ds_mla bytes: append of kv_bf16 reproduces kv_cache exactly ----

TEST(AppendFlashMla, DsMlaBytesEqualFlashMla) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  const std::string root = std::string(MLAKIT_TESTDATA_DIR) + "/flashmla/";
  int cases = 0;
  for (const char* name : {"sparse_b1_sq1_h128_topk256", "sparse_b2_sq2_h64_topk128"}) {
    SCOPED_TRACE(name);
    NpyArray kv_bf16, kv_cache;
    std::string error;
    if (!load_npy_checked(root + name + "/kv_bf16.npy", "<u2", {}, &kv_bf16, &error)) {
      if (cases == 0 && error.find("cannot open") != std::string::npos) GTEST_SKIP() << "testdata missing: " << error;
      FAIL() << error;
    }
    ASSERT_TRUE(load_npy_checked(root + name + "/kv_cache.npy", "|u1", {}, &kv_cache, &error)) << error;
    ASSERT_EQ(kv_bf16.shape.size(), 4u);
    const int64_t num_pages = kv_bf16.shape[0], P = kv_bf16.shape[1], rows = num_pages * P;
    ASSERT_EQ(kv_cache.shape, (std::vector<int64_t>{num_pages, P, 1, ds_mla::kRowBytes}));
    ASSERT_EQ(kv_bf16.shape[3], int64_t(ds_mla::kDimC + ds_mla::kDimR));

    DeviceBuffer rows_dev, slots_dev, cache_dev;
    DeviceBuffer::upload(&rows_dev, kv_bf16.data);
    std::vector<int64_t> slots(static_cast<size_t>(rows));
    std::iota(slots.begin(), slots.end(), 0);
    DeviceBuffer::upload(&slots_dev, slots);
    DeviceBuffer::upload(&cache_dev, pattern_bytes(kv_cache.data.size()));

    const int64_t d_qk = ds_mla::kDimC + ds_mla::kDimR;
    AppendKvProblem p;
    p.kv_c = TensorView::strided(rows_dev.get(), DType::kBF16, {rows, ds_mla::kDimC}, {d_qk, 1}, Device::cuda());
    p.k_pe = TensorView::strided(rows_dev.as<uint16_t>() + ds_mla::kDimC, DType::kBF16, {rows, ds_mla::kDimR}, {d_qk, 1},
                  Device::cuda());
    p.slot_mapping = TensorView::strided(slots_dev.get(), DType::kInt64, {rows}, {1}, Device::cuda());
    p.cache = KvCacheView::contiguous(cache_dev.get(), KvFormat::kFP8DsMla, num_pages, P, MlaDims{}, Device::cuda());
    const Status st = cuda->run(p, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    CACHE_TEST_CUDA(cudaDeviceSynchronize());
    EXPECT_TRUE(same_bytes(cache_dev.download<uint8_t>(kv_cache.data.size()), kv_cache.data, "kv_cache"));
    ++cases;
  }
}

// ---- supports(): what the kernels do not handle is refused with field, value and rule ----

TEST(AppendSupports, RejectsWhatTheKernelDoesNotHandle) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  AppendConfig cfg;
  cfg.tokens = 4;
  cfg.qmode = QMode::kRopeFp8;
  cfg.rope = true;
  AppendCase c = AppendCase::make(cfg);
  DeviceCase dev(c);
  const AppendKvProblem good = c.problem(dev.buffers(false), Device::cuda());
  ASSERT_TRUE(cuda->supports(good).ok());

  const auto expect_refused = [&](AppendKvProblem p, const std::string& field) {
    const Status s = cuda->supports(p);
    EXPECT_EQ(s.code(), StatusCode::kNotSupported) << field << ": " << s.to_string();
    EXPECT_NE(s.message().find(field + "="), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("must"), std::string::npos) << s.message();
    const Status r = cuda->run(p, nullptr);  // run() refuses it too, before any launch
    EXPECT_FALSE(r.ok());
  };
  {
    AppendKvProblem p = good;  // kv_c misaligned by one element: no 16-byte loads
    p.kv_c.data = static_cast<uint16_t*>(p.kv_c.data) + 1;
    expect_refused(p, "kv_c.data");
  }
  {
    AppendKvProblem p = good;  // a kv_c row stride that breaks 16-byte alignment of rows
    p.kv_c.stride[0] = 515;
    expect_refused(p, "kv_c.stride[0]");
  }
  {
    AppendKvProblem p = good;  // bf16 rows of a cache whose row stride is not a multiple of 16 bytes
    p.cache.pages.shape[0] = 1;
    p.cache.pages.stride[1] = 1160;
    expect_refused(p, "cache.pages.stride[1]");
  }
  {
    AppendKvProblem p = good;
    p.q_fp8.stride[1] = 581;
    p.q_fp8.stride[0] = 584 * cfg.h_q;
    expect_refused(p, "q_fp8.stride[1]");
  }
  {
    AppendKvProblem p = good;  // d_c = 100 is valid for the reference, not for 8-element chunks
    p.cache.dims = {100, 64};
    p.cache.pages.shape[2] = kv_row_bytes(KvFormat::kBF16, 100, 64);
    p.kv_c.shape[1] = 100;
    p.q.shape[2] = p.q_fp8.shape[2] = 164;
    p.q_fp8 = {};
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    expect_refused(p, "cache.dims.d_c");
  }
}

// T = 0 is valid (validate() allows empty batches): nothing is launched and nothing changes; covered by the
// grid above (tokens = 0). Here: a null-data T = 0 problem is accepted too.
TEST(AppendEmpty, ZeroTokensWithNullData) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  AppendConfig cfg;
  cfg.tokens = 0;
  AppendCase c = AppendCase::make(cfg);
  DeviceCase dev(c);
  AppendKvProblem p = c.problem(dev.buffers(false), Device::cuda());
  p.kv_c.data = p.k_pe.data = p.slot_mapping.data = nullptr;
  const Status v = p.validate();
  if (!v.ok()) GTEST_SKIP() << "validate() wants data for empty tensors: " << v.to_string();
  EXPECT_TRUE(cuda->run(p, nullptr).ok());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bytes(dev.cache.download<uint8_t>(c.cache.size()), c.cache, "cache"));
}

}  // namespace
}  // namespace mlakit::test
