// append_kv (docs/spec.md section 7) and gather_kv (section 8) of the reference, for all four formats and page
// sizes 1..256: rows land in the right slot and nowhere else, gather returns them at cu_out offsets, the
// round trip stays within each format's error, fused RoPE equals rope-then-append, and bad slots or
// positions are rejected before any byte is written.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mlakit/kv_format.h"
#include "mlakit/numeric.h"
#include "mlakit/rope.h"
#include "reference/kv_rows.h"
#include "reference/ops.h"

namespace mlakit {
namespace {

constexpr uint64_t kSeed = 99;
constexpr uint8_t kPoisonByte = 0xFF;     // NaN in bf16 (0xFFFF), fp16 (0xFFFF), e4m3 (0xFF) and float32
constexpr uint16_t kPoison16 = 0xFFFF;
constexpr int64_t kPageGapBytes = 48;     // pages are laid out with a gap, to check the page stride is used
constexpr int64_t kRowPad = 8;            // kv_c rows carry NaN padding, to check its row stride is used
constexpr float kKvScale = 0.05f;         // fp8_e4m3 per-tensor scale: inputs in [-2, 2] map to [-40, 40]
constexpr float kWrongScale = 1000.0f;    // kv_scale_value when the scale pointer is set: must be ignored
constexpr MlaDims kDims{512, 64};

// ---- host tensors of a runtime float dtype ----

float read_as_float(DType t, const uint8_t* p) {
  uint16_t h;
  float f;
  switch (t) {
    case DType::kBF16: std::memcpy(&h, p, 2); return bf16_to_float(h);
    case DType::kFP16: std::memcpy(&h, p, 2); return fp16_to_float(h);
    default: std::memcpy(&f, p, 4); return f;
  }
}
void write_from_float(DType t, uint8_t* p, float v) {
  uint16_t h;
  switch (t) {
    case DType::kBF16: h = float_to_bf16(v); std::memcpy(p, &h, 2); return;
    case DType::kFP16: h = float_to_fp16(v); std::memcpy(p, &h, 2); return;
    default: std::memcpy(p, &v, 4); return;
  }
}

/// A 2-D or 3-D host tensor whose rows are `row_stride` elements apart; padding and unset elements are
/// NaN-poisoned.
struct HostTensor {
  DType dtype = DType::kFP32;
  std::vector<uint8_t> bytes;
  TensorView view;

  static HostTensor make(DType dtype, std::vector<int64_t> shape, int64_t row_pad = 0) {
    HostTensor h;
    h.dtype = dtype;
    const int64_t esize = int64_t(dtype_size(dtype));
    const int64_t last = shape.back();
    int64_t rows = 1;
    for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
    h.bytes.assign(size_t(rows * (last + row_pad) * esize), kPoisonByte);
    h.view.data = h.bytes.data();
    h.view.dtype = dtype;
    h.view.ndim = int(shape.size());
    int64_t stride = 1;
    for (int d = h.view.ndim - 1; d >= 0; --d) {
      h.view.shape[d] = shape[size_t(d)];
      h.view.stride[d] = stride;
      stride *= shape[size_t(d)] + (d == h.view.ndim - 1 ? row_pad : 0);
    }
    return h;
  }
  HostTensor(const HostTensor& o) : dtype(o.dtype), bytes(o.bytes), view(o.view) { view.data = bytes.data(); }
  HostTensor& operator=(const HostTensor& o) {
    dtype = o.dtype;
    bytes = o.bytes;
    view = o.view;
    view.data = bytes.data();
    return *this;
  }
  HostTensor() = default;

  uint8_t* elem(std::initializer_list<int64_t> idx) {
    int64_t off = 0;
    int d = 0;
    for (int64_t i : idx) off += i * view.stride[d++];
    return bytes.data() + off * int64_t(dtype_size(dtype));
  }
  float get(std::initializer_list<int64_t> idx) { return read_as_float(dtype, elem(idx)); }
  void set(std::initializer_list<int64_t> idx, float v) { write_from_float(dtype, elem(idx), v); }
};

/// Fills a 2-D tensor with uniform values in [-2, 2], rounded to its dtype (padding stays NaN).
void fill_random(HostTensor& t, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (int64_t r = 0; r < t.view.shape[0]; ++r)
    for (int64_t c = 0; c < t.view.shape[1]; ++c) t.set({r, c}, u(rng));
}

// ---- the paged cache under test ----

struct Cache {
  std::vector<uint8_t> bytes;
  KvCacheView view;
  float scale_storage = kKvScale;
  int64_t page_stride = 0;

  Cache(KvFormat format, int64_t num_pages, int64_t page_size) {
    const int64_t row_bytes = kv_row_bytes(format, kDims.d_c, kDims.d_r);
    page_stride = page_size * row_bytes + kPageGapBytes;
    bytes.assign(size_t(num_pages * page_stride), kPoisonByte);
    view = KvCacheView::contiguous(bytes.data(), format, num_pages, page_size, kDims);
    view.pages.stride[0] = page_stride;
    view.kv_scale = &scale_storage;
    view.kv_scale_value = kWrongScale;
  }
  Cache(const Cache&) = delete;
  uint8_t* row(int64_t slot) {
    return bytes.data() + (slot / view.page_size()) * page_stride + (slot % view.page_size()) * view.row_bytes();
  }
};

/// The row bytes the writer rules of docs/spec.md section 4 give for `x` (d_qk floats). bf16, fp16 and
/// fp8_e4m3 are computed here from numeric.h; fp8_ds_mla's group-scale rule has its own golden tests
/// (test_kv_format), so its row comes from the reference encoder.
std::vector<uint8_t> expected_row(const KvCacheView& cache, const std::vector<float>& x) {
  std::vector<uint8_t> row(static_cast<size_t>(cache.row_bytes()));
  for (size_t i = 0; i < x.size(); ++i) {
    uint16_t h;
    switch (cache.format) {
      case KvFormat::kBF16: h = float_to_bf16(x[i]); std::memcpy(&row[2 * i], &h, 2); break;
      case KvFormat::kFP16: h = float_to_fp16(x[i]); std::memcpy(&row[2 * i], &h, 2); break;
      case KvFormat::kFP8E4M3: row[i] = float_to_e4m3(x[i] / kKvScale); break;
      case KvFormat::kFP8DsMla: break;
      case KvFormat::kFP8DsV4: break;  // not a row format (test_ds_v4.cpp); these tests do not use it
    }
  }
  if (cache.format == KvFormat::kFP8DsMla) reference::encode_kv_row(cache, x.data(), row.data());
  return row;
}

/// Dequantised value of column i of a raw row, computed here from the bytes (independent of decode_kv_row).
float dequant(const KvCacheView& cache, const uint8_t* row, int64_t i) {
  uint16_t h;
  switch (cache.format) {
    case KvFormat::kBF16: std::memcpy(&h, row + 2 * i, 2); return bf16_to_float(h);
    case KvFormat::kFP16: std::memcpy(&h, row + 2 * i, 2); return fp16_to_float(h);
    case KvFormat::kFP8E4M3: return e4m3_to_float(row[i]) * kKvScale;
    case KvFormat::kFP8DsMla: {
      if (i >= ds_mla::kDimC) {
        std::memcpy(&h, row + ds_mla::kRopeOffset + 2 * (i - ds_mla::kDimC), 2);
        return bf16_to_float(h);
      }
      float s;
      std::memcpy(&s, row + ds_mla::kScaleOffset + 4 * (i / ds_mla::kGroupSize), 4);
      return e4m3_to_float(row[ds_mla::kQuantOffset + i]) * s;
    }
    case KvFormat::kFP8DsV4: break;  // not a row format (test_ds_v4.cpp)
  }
  return NAN;
}

/// |dequant(encode(x)) - x| bound of each format (half a step of round-to-nearest, docs/spec.md section 10).
double format_error_bound(const KvCacheView& cache, const uint8_t* row, int64_t i, double x) {
  const double ax = std::fabs(x);
  switch (cache.format) {
    case KvFormat::kBF16: return std::ldexp(ax, -8);
    case KvFormat::kFP16: return std::ldexp(ax, -11) + std::ldexp(1.0, -25);
    case KvFormat::kFP8E4M3: return std::ldexp(ax, -4) + std::ldexp(double(kKvScale), -10);
    case KvFormat::kFP8DsMla: {
      if (i >= ds_mla::kDimC) return std::ldexp(ax, -8);
      float s;
      std::memcpy(&s, row + ds_mla::kScaleOffset + 4 * (i / ds_mla::kGroupSize), 4);
      return std::ldexp(ax, -4) + std::ldexp(double(s), -10);
    }
    case KvFormat::kFP8DsV4: break;  // not a row format (test_ds_v4.cpp)
  }
  return 0.0;
}

/// Input dtype that keeps bf16/fp16 caches bit-exact: the cache's own dtype, else the parameter.
std::string case_name(KvFormat f, int64_t page_size, DType in) {
  return std::string(kv_format_name(f)) + "_P" + std::to_string(page_size) + "_" + dtype_name(in);
}

// =========================================================================================================
// Round trip: requests with edge lengths, shuffled block tables, shuffled tokens with padding slots.

using RoundTripParam = std::tuple<KvFormat, int64_t, DType>;
class AppendGatherRoundTrip : public ::testing::TestWithParam<RoundTripParam> {};

TEST_P(AppendGatherRoundTrip, RowsLandInTheirSlotsAndGatherReturnsThem) {
  const auto [format, page_size, in_dtype] = GetParam();
  SCOPED_TRACE(case_name(format, page_size, in_dtype));
  std::mt19937 rng(kSeed + uint64_t(page_size) * 7 + uint64_t(format) * 131 + uint64_t(in_dtype));
  const int64_t d_c = kDims.d_c, d_r = kDims.d_r, d_qk = kDims.d_qk();

  // Requests: L = 0, 1, P-1, P, P+1, 2P+3 and one random length up to 3P.
  std::vector<int64_t> lens = {0, 1, page_size - 1, page_size, page_size + 1, 2 * page_size + 3,
                               std::uniform_int_distribution<int64_t>(0, 3 * page_size)(rng)};
  const int64_t batch = int64_t(lens.size());
  int64_t pages_used = 0, max_pages = 1;
  for (int64_t L : lens) {
    pages_used += (L + page_size - 1) / page_size;
    max_pages = std::max(max_pages, (L + page_size - 1) / page_size + 1);
  }
  const int64_t num_pages = pages_used + 3;  // 3 pages nobody uses: must stay poisoned
  std::vector<int32_t> page_ids(static_cast<size_t>(num_pages));
  std::iota(page_ids.begin(), page_ids.end(), 0);
  std::shuffle(page_ids.begin(), page_ids.end(), rng);
  std::vector<int32_t> block_table(size_t(batch * max_pages), -1);  // -1 past the used pages: never read
  int64_t next_page = 0;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < (lens[size_t(b)] + page_size - 1) / page_size; ++j)
      block_table[size_t(b * max_pages + j)] = page_ids[size_t(next_page++)];

  // Tokens: every (request, position) once, plus ~10% padding tokens with assorted negative slots.
  struct Token {
    int64_t b, t;  // b < 0: padding
  };
  std::vector<Token> tokens;
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < lens[size_t(b)]; ++t) tokens.push_back({b, t});
  const int64_t num_padding = int64_t(tokens.size()) / 10 + 2;
  for (int64_t k = 0; k < num_padding; ++k) tokens.push_back({-1, k});
  std::shuffle(tokens.begin(), tokens.end(), rng);
  const int64_t num_tokens = int64_t(tokens.size());
  const int64_t negative_slots[] = {-1, -2, -1000, std::numeric_limits<int64_t>::min()};
  std::vector<int64_t> slots(static_cast<size_t>(num_tokens));
  for (int64_t k = 0; k < num_tokens; ++k) {
    const Token& tok = tokens[size_t(k)];
    slots[size_t(k)] = tok.b < 0 ? negative_slots[tok.t % 4]
                                 : int64_t(block_table[size_t(tok.b * max_pages + tok.t / page_size)]) * page_size +
                                       tok.t % page_size;
  }

  HostTensor kv_c = HostTensor::make(in_dtype, {num_tokens, d_c}, kRowPad);
  HostTensor k_pe = HostTensor::make(in_dtype, {num_tokens, d_r});
  fill_random(kv_c, rng);
  fill_random(k_pe, rng);
  const HostTensor k_pe_before = k_pe;
  Cache cache(format, num_pages, page_size);

  AppendKvProblem ap;
  ap.kv_c = kv_c.view;
  ap.k_pe = k_pe.view;
  ap.slot_mapping = TensorView::contiguous(slots.data(), DType::kInt64, {num_tokens});
  ap.cache = cache.view;
  const Status valid = ap.validate();  // every page size, powers of two or not (docs/spec.md section 7)
  ASSERT_TRUE(valid.ok()) << valid.to_string();
  const Status st = reference::append_kv(ap);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_EQ(k_pe.bytes, k_pe_before.bytes);

  // Every byte of the cache: written rows hold their token's encoding, everything else is untouched.
  std::vector<int64_t> token_of_slot(size_t(num_pages * page_size), -1);
  for (int64_t k = 0; k < num_tokens; ++k)
    if (slots[size_t(k)] >= 0) token_of_slot[size_t(slots[size_t(k)])] = k;
  const int64_t row_bytes = cache.view.row_bytes();
  std::vector<float> x(static_cast<size_t>(d_qk));
  int64_t rows_written = 0;
  for (int64_t slot = 0; slot < num_pages * page_size; ++slot) {
    const uint8_t* row = cache.row(slot);
    const int64_t k = token_of_slot[size_t(slot)];
    if (k < 0) {
      for (int64_t i = 0; i < row_bytes; ++i) ASSERT_EQ(row[i], kPoisonByte) << "unwritten slot " << slot << " byte " << i;
      continue;
    }
    ++rows_written;
    for (int64_t i = 0; i < d_c; ++i) x[size_t(i)] = kv_c.get({k, i});
    for (int64_t i = 0; i < d_r; ++i) x[size_t(d_c + i)] = k_pe.get({k, i});
    const std::vector<uint8_t> want = expected_row(cache.view, x);
    ASSERT_EQ(std::memcmp(row, want.data(), size_t(row_bytes)), 0) << "slot " << slot << " (token " << k << ")";
    // bf16/fp16 caches fed their own dtype are bit-exact copies of the input.
    if ((format == KvFormat::kBF16 && in_dtype == DType::kBF16) ||
        (format == KvFormat::kFP16 && in_dtype == DType::kFP16)) {
      ASSERT_EQ(std::memcmp(row, kv_c.elem({k, 0}), size_t(2 * d_c)), 0) << "slot " << slot;
      ASSERT_EQ(std::memcmp(row + 2 * d_c, k_pe.elem({k, 0}), size_t(2 * d_r)), 0) << "slot " << slot;
    }
  }
  EXPECT_EQ(rows_written, std::accumulate(lens.begin(), lens.end(), int64_t{0}));
  for (int64_t pg = 0; pg < num_pages; ++pg)
    for (int64_t i = page_size * row_bytes; i < cache.page_stride; ++i)
      ASSERT_EQ(cache.bytes[size_t(pg * cache.page_stride + i)], kPoisonByte) << "page gap " << pg;

  // Gather into a poisoned output with spare rows at the end.
  std::vector<int32_t> seq_lens(lens.begin(), lens.end());
  std::vector<int32_t> cu_out(size_t(batch + 1), 0);
  for (int64_t b = 0; b < batch; ++b) cu_out[size_t(b + 1)] = cu_out[size_t(b)] + seq_lens[size_t(b)];
  constexpr int64_t kSpareRows = 3;
  const int64_t total_rows = cu_out.back() + kSpareRows;
  std::vector<uint16_t> out(size_t(total_rows * d_qk), kPoison16);
  GatherKvProblem gp;
  gp.cache = cache.view;
  gp.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {batch, max_pages});
  gp.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {batch});
  gp.cu_out = TensorView::contiguous(cu_out.data(), DType::kInt32, {batch + 1});
  gp.out = TensorView::contiguous(out.data(), DType::kBF16, {total_rows, d_qk});
  const Status gvalid = gp.validate();
  ASSERT_TRUE(gvalid.ok()) << gvalid.to_string();
  const Status gs = reference::gather_kv(gp);
  ASSERT_TRUE(gs.ok()) << gs.to_string();

  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < lens[size_t(b)]; ++t) {
      const int64_t slot = int64_t(block_table[size_t(b * max_pages + t / page_size)]) * page_size + t % page_size;
      const int64_t k = token_of_slot[size_t(slot)];
      const uint8_t* row = cache.row(slot);
      for (int64_t i = 0; i < d_qk; ++i) {
        const uint16_t got = out[size_t((cu_out[size_t(b)] + t) * d_qk + i)];
        // Exact: the bf16 rounding of the dequantised stored value.
        ASSERT_EQ(got, float_to_bf16(dequant(cache.view, row, i))) << "request " << b << " token " << t << " col " << i;
        // Round trip against the original input: format error plus the bf16 output rounding (2^-8).
        const double in = i < d_c ? kv_c.get({k, i}) : k_pe.get({k, i - d_c});
        const double bound = format_error_bound(cache.view, row, i, in) * (1.0 + 1.0 / 256) + std::ldexp(std::fabs(in), -8);
        ASSERT_LE(std::fabs(double(bf16_to_float(got)) - in), bound) << "request " << b << " token " << t << " col " << i;
      }
    }
  }
  for (int64_t r = cu_out.back(); r < total_rows; ++r)
    for (int64_t i = 0; i < d_qk; ++i) ASSERT_EQ(out[size_t(r * d_qk + i)], kPoison16) << "spare row " << r;
}

INSTANTIATE_TEST_SUITE_P(
    FormatsPagesDtypes, AppendGatherRoundTrip,
    ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla),
                       // 3 and 61: pages that are not a power of two (docs/spec.md section 2: only dense decode
                       // needs one; append_kv and gather_kv find rows by slot and by division)
                       ::testing::Values(int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{8}, int64_t{16},
                                         int64_t{32}, int64_t{61}, int64_t{64}, int64_t{128}, int64_t{256}),
                       ::testing::Values(DType::kBF16, DType::kFP16, DType::kFP32)),
    [](const ::testing::TestParamInfo<RoundTripParam>& info) {
      return case_name(std::get<0>(info.param), std::get<1>(info.param), std::get<2>(info.param));
    });

// =========================================================================================================
// Fused RoPE: append with positions == rope(k_pe) then plain append; q rotated in place; q_fp8 = e4m3(q/s).

constexpr int64_t kRopePageSize = 16;
constexpr int64_t kRopeTokens = 23;
constexpr int64_t kRopeHeads = 3;
constexpr int64_t kMaxPos = 4096;
constexpr float kQScale = 0.0625f;

struct RopeScenario {
  HostTensor kv_c, k_pe, q;
  std::vector<int64_t> slots, positions;
  std::vector<float> cos_sin;
  int64_t num_pages = 0;

  RopeScenario(DType in_dtype, DType q_dtype, std::mt19937& rng) {
    kv_c = HostTensor::make(in_dtype, {kRopeTokens, kDims.d_c}, kRowPad);
    k_pe = HostTensor::make(in_dtype, {kRopeTokens, kDims.d_r});
    q = HostTensor::make(q_dtype, {kRopeTokens, kRopeHeads, kDims.d_qk()});
    fill_random(kv_c, rng);
    fill_random(k_pe, rng);
    std::uniform_real_distribution<float> u(-2.0f, 2.0f);
    for (int64_t t = 0; t < kRopeTokens; ++t)
      for (int64_t h = 0; h < kRopeHeads; ++h)
        for (int64_t i = 0; i < kDims.d_qk(); ++i) q.set({t, h, i}, u(rng));
    num_pages = 2 * kRopeTokens / kRopePageSize + 2;
    std::vector<int64_t> all(static_cast<size_t>(num_pages * kRopePageSize));
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), rng);
    slots.assign(all.begin(), all.begin() + kRopeTokens);
    slots[3] = -1;  // padding tokens: skipped by the cache write, but their q is still rotated
    slots[11] = -1;
    std::uniform_int_distribution<int64_t> pos(1, kMaxPos - 1);
    for (int64_t t = 0; t < kRopeTokens; ++t) positions.push_back(pos(rng));
    positions[0] = 0;
    positions[1] = kMaxPos - 1;
    cos_sin = yarn_cos_sin_table(YarnConfig{}, kMaxPos);
  }

  AppendKvProblem problem(const Cache& cache, TensorView q_fp8) {
    AppendKvProblem p;
    p.kv_c = kv_c.view;
    p.k_pe = k_pe.view;
    p.slot_mapping = TensorView::contiguous(slots.data(), DType::kInt64, {kRopeTokens});
    p.cache = cache.view;
    p.positions = TensorView::contiguous(positions.data(), DType::kInt64, {kRopeTokens});
    p.cos_sin = TensorView::contiguous(cos_sin.data(), DType::kFP32, {kMaxPos, kDims.d_r});
    p.q = q.view;
    p.q_fp8 = q_fp8;
    p.q_scale_value = kQScale;
    return p;
  }
};

using FusedParam = std::tuple<KvFormat, RopeStyle, DType>;
class AppendFusedRope : public ::testing::TestWithParam<FusedParam> {};

TEST_P(AppendFusedRope, EqualsRopeThenPlainAppend) {
  const auto [format, style, in_dtype] = GetParam();
  const DType q_dtype = in_dtype == DType::kFP16 ? DType::kFP16 : DType::kBF16;
  SCOPED_TRACE(std::string(kv_format_name(format)) + " " + rope_style_name(style) + " " + dtype_name(in_dtype));
  std::mt19937 rng(kSeed + uint64_t(format) * 3 + uint64_t(style) * 17 + uint64_t(in_dtype) * 101);
  RopeScenario sc(in_dtype, q_dtype, rng);
  const int64_t d_c = kDims.d_c, d_r = kDims.d_r, d_qk = kDims.d_qk();

  // Fused path.
  Cache fused(format, sc.num_pages, kRopePageSize);
  HostTensor q_fused = sc.q;
  std::vector<uint8_t> q_fp8(size_t(kRopeTokens * kRopeHeads * d_qk), kPoisonByte);
  AppendKvProblem fp = sc.problem(fused, TensorView::contiguous(q_fp8.data(), DType::kFP8E4M3, {kRopeTokens, kRopeHeads, d_qk}));
  fp.q = q_fused.view;
  fp.rope_style = style;
  const HostTensor k_pe_before = sc.k_pe;
  const Status fs = reference::append_kv(fp);
  ASSERT_TRUE(fs.ok()) << fs.to_string();
  EXPECT_EQ(sc.k_pe.bytes, k_pe_before.bytes) << "input k_pe must not be modified";

  // Unfused path: rope on a copy of k_pe and on q's last d_r columns, then a plain append.
  HostTensor k_pe_rot = sc.k_pe;
  RopeProblem rk;
  rk.x = k_pe_rot.view;
  rk.x.ndim = 3;
  rk.x.shape[0] = kRopeTokens, rk.x.shape[1] = 1, rk.x.shape[2] = d_r;
  rk.x.stride[0] = d_r, rk.x.stride[1] = d_r, rk.x.stride[2] = 1;
  rk.positions = fp.positions;
  rk.cos_sin = fp.cos_sin;
  rk.style = style;
  ASSERT_TRUE(reference::rope(rk).ok());
  HostTensor q_plain = sc.q;
  RopeProblem rq = rk;
  rq.x = q_plain.view;
  rq.x.data = q_plain.elem({0, 0, d_c});
  rq.x.shape[2] = d_r;
  ASSERT_TRUE(reference::rope(rq).ok());

  Cache plain(format, sc.num_pages, kRopePageSize);
  AppendKvProblem pp;
  pp.kv_c = sc.kv_c.view;
  pp.k_pe = k_pe_rot.view;
  pp.slot_mapping = fp.slot_mapping;
  pp.cache = plain.view;
  ASSERT_TRUE(reference::append_kv(pp).ok());

  EXPECT_EQ(fused.bytes, plain.bytes) << "fused cache differs from rope-then-append";
  EXPECT_EQ(q_fused.bytes, q_plain.bytes) << "fused q differs from rope on q_pe";

  // The rotation did something (so the comparison above could fail): token 1 has position max_pos - 1.
  Cache unrotated(format, sc.num_pages, kRopePageSize);
  AppendKvProblem up = pp;
  up.k_pe = sc.k_pe.view;
  up.cache = unrotated.view;
  ASSERT_TRUE(reference::append_kv(up).ok());
  EXPECT_NE(std::memcmp(unrotated.row(sc.slots[1]), fused.row(sc.slots[1]), size_t(fused.view.row_bytes())), 0);
  EXPECT_NE(q_fused.bytes, sc.q.bytes);
  // Token 0 has position 0: its q is unchanged (cos 1, sin 0 for DeepSeek-V3's attention scale 1).
  EXPECT_EQ(std::memcmp(q_fused.elem({0, 0, 0}), sc.q.elem({0, 0, 0}), size_t(kRopeHeads * d_qk) * dtype_size(q_dtype)), 0);

  // q_fp8: every element of the rotated q divided by q_scale, saturating.
  for (int64_t t = 0; t < kRopeTokens; ++t)
    for (int64_t h = 0; h < kRopeHeads; ++h)
      for (int64_t i = 0; i < d_qk; ++i)
        ASSERT_EQ(q_fp8[size_t((t * kRopeHeads + h) * d_qk + i)], float_to_e4m3(q_plain.get({t, h, i}) / kQScale))
            << "t " << t << " h " << h << " i " << i;
}

INSTANTIATE_TEST_SUITE_P(
    FormatsStyles, AppendFusedRope,
    ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla),
                       ::testing::Values(RopeStyle::kInterleaved, RopeStyle::kNeox),
                       ::testing::Values(DType::kBF16, DType::kFP16, DType::kFP32)),
    [](const ::testing::TestParamInfo<FusedParam>& info) {
      return std::string(kv_format_name(std::get<0>(info.param))) + "_" + rope_style_name(std::get<1>(info.param)) +
             "_" + dtype_name(std::get<2>(info.param));
    });

// =========================================================================================================
// Invalid slots and positions: an error naming the field, and not one byte written anywhere.

class AppendRejects : public ::testing::TestWithParam<KvFormat> {};

TEST_P(AppendRejects, OutOfRangeSlotOrPositionWritesNothing) {
  const KvFormat format = GetParam();
  SCOPED_TRACE(kv_format_name(format));
  std::mt19937 rng(kSeed + 5);
  RopeScenario sc(DType::kBF16, DType::kBF16, rng);
  const int64_t capacity = sc.num_pages * kRopePageSize;
  const int64_t d_qk = kDims.d_qk();

  struct Bad {
    const char* what;
    int64_t token;
    int64_t slot;      // replaces slots[token] unless 0 (then positions[token] is replaced)
    int64_t position;
    const char* field;
  };
  const Bad cases[] = {
      {"slot == capacity", kRopeTokens - 1, capacity, 0, "slot_mapping[22]"},
      {"slot far too large", 5, capacity * 1000, 0, "slot_mapping[5]"},
      {"position == max_pos", kRopeTokens - 1, 0, kMaxPos, "positions[22]"},
      {"negative position", 4, 0, -1, "positions[4]"},
  };
  for (const Bad& bad : cases) {
    SCOPED_TRACE(bad.what);
    RopeScenario s = sc;
    if (bad.slot != 0) s.slots[size_t(bad.token)] = bad.slot;
    else s.positions[size_t(bad.token)] = bad.position;
    Cache cache(format, s.num_pages, kRopePageSize);
    const std::vector<uint8_t> cache_before = cache.bytes;
    const HostTensor q_before = s.q;
    std::vector<uint8_t> q_fp8(size_t(kRopeTokens * kRopeHeads * d_qk), kPoisonByte);
    AppendKvProblem p = s.problem(cache, TensorView::contiguous(q_fp8.data(), DType::kFP8E4M3, {kRopeTokens, kRopeHeads, d_qk}));
    const Status st = reference::append_kv(p);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(bad.field), std::string::npos) << st.message();
    EXPECT_EQ(cache.bytes, cache_before) << "cache written despite the error";
    EXPECT_EQ(s.q.bytes, q_before.bytes) << "q rotated despite the error";
    EXPECT_TRUE(std::all_of(q_fp8.begin(), q_fp8.end(), [](uint8_t v) { return v == kPoisonByte; }));
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, AppendRejects,
                         ::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla),
                         [](const ::testing::TestParamInfo<KvFormat>& info) { return std::string(kv_format_name(info.param)); });

TEST(AppendKv, DuplicateSlotsLastTokenWins) {
  std::mt19937 rng(kSeed + 9);
  HostTensor kv_c = HostTensor::make(DType::kBF16, {3, kDims.d_c});
  HostTensor k_pe = HostTensor::make(DType::kBF16, {3, kDims.d_r});
  fill_random(kv_c, rng);
  fill_random(k_pe, rng);
  std::vector<int64_t> slots = {5, 5, -1};
  Cache cache(KvFormat::kBF16, 1, 8);
  AppendKvProblem p;
  p.kv_c = kv_c.view;
  p.k_pe = k_pe.view;
  p.slot_mapping = TensorView::contiguous(slots.data(), DType::kInt64, {3});
  p.cache = cache.view;
  ASSERT_TRUE(reference::append_kv(p).ok());
  EXPECT_EQ(std::memcmp(cache.row(5), kv_c.elem({1, 0}), size_t(2 * kDims.d_c)), 0);
  EXPECT_EQ(std::memcmp(cache.row(5) + 2 * kDims.d_c, k_pe.elem({1, 0}), size_t(2 * kDims.d_r)), 0);
}

TEST(GatherKv, BadPageIdIsRejectedAndWritesNothing) {
  Cache cache(KvFormat::kBF16, 4, 16);
  std::fill(cache.bytes.begin(), cache.bytes.end(), 0);
  std::vector<int32_t> block_table = {0, 1, 2, 4};  // request 1 needs page 4 of a 4-page cache
  std::vector<int32_t> seq_lens = {20, 17};
  std::vector<int32_t> cu_out = {0, 20, 37};
  std::vector<uint16_t> out(size_t(37 * kDims.d_qk()), kPoison16);
  GatherKvProblem gp;
  gp.cache = cache.view;
  gp.block_table = TensorView::contiguous(block_table.data(), DType::kInt32, {2, 2});
  gp.seq_lens = TensorView::contiguous(seq_lens.data(), DType::kInt32, {2});
  gp.cu_out = TensorView::contiguous(cu_out.data(), DType::kInt32, {3});
  gp.out = TensorView::contiguous(out.data(), DType::kBF16, {37, kDims.d_qk()});
  const Status st = reference::gather_kv(gp);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("block_table[1][1]=4"), std::string::npos) << st.message();
  EXPECT_TRUE(std::all_of(out.begin(), out.end(), [](uint16_t v) { return v == kPoison16; }));
}

}  // namespace
}  // namespace mlakit
