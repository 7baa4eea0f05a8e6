#include "common/decode_case.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "common/compare.h"
#include "mlakit/kv_format.h"
#include "mlakit/numeric.h"
#include "reference/kv_rows.h"
#include "reference/parallel.h"

namespace mlakit::test {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- decoders written from docs/spec.md section 4 alone (the oracle must not share code with the reference) ----

double oracle_e4m3_from_bits(uint8_t b) {
  const int sign = b >> 7, exponent = (b >> 3) & 0xF, mantissa = b & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<double>::quiet_NaN();  // S.1111.111
  const double magnitude = exponent == 0 ? std::ldexp(mantissa / 8.0, 1 - 7)                 // subnormal
                                         : std::ldexp(1.0 + mantissa / 8.0, exponent - 7);  // bias 7
  return sign ? -magnitude : magnitude;
}

/// oracle_e4m3_from_bits of every code, computed once: the large test cases decode hundreds of millions of bytes.
double oracle_e4m3(uint8_t b) {
  static const std::array<double, 256> table = [] {
    std::array<double, 256> t{};
    for (int i = 0; i < 256; ++i) t[size_t(i)] = oracle_e4m3_from_bits(uint8_t(i));
    return t;
  }();
  return table[b];
}

uint16_t read_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }  // little-endian

float read_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}

/// The 16-bit pattern of float `x` in `dtype` (bf16 or fp16), round to nearest even.
uint16_t to_half_bits(float x, DType dtype) { return dtype == DType::kFP16 ? float_to_fp16(x) : float_to_bf16(x); }

std::vector<uint16_t> random_half(std::mt19937_64& rng, size_t n, float range, DType dtype) {
  std::uniform_real_distribution<float> dist(-range, range);
  std::vector<uint16_t> bits(n);
  for (auto& v : bits) v = to_half_bits(range > 0 ? dist(rng) : 0.0f, dtype);
  return bits;
}

/// Writes one row of `values` into `row` in the cache's format: bf16/fp16 here, fp8 through the
/// library's writer (docs/spec.md 4 rules); the oracle later decodes the bytes on its own.
void encode_row(const KvCacheView& view, const std::vector<float>& values, uint8_t* row) {
  if (view.format == KvFormat::kBF16 || view.format == KvFormat::kFP16) {
    const DType dtype = view.format == KvFormat::kBF16 ? DType::kBF16 : DType::kFP16;
    for (size_t c = 0; c < values.size(); ++c) {
      const uint16_t bits = to_half_bits(values[c], dtype);
      std::memcpy(row + 2 * c, &bits, sizeof bits);
    }
    return;
  }
  reference::encode_kv_row(view, values.data(), row);
}

std::vector<float> random_row(std::mt19937_64& rng, int64_t d_qk, float range) {
  std::uniform_real_distribution<float> dist(-range, range);
  std::vector<float> v(static_cast<size_t>(d_qk));
  for (auto& x : v) x = dist(rng);
  return v;
}

KvCacheView cache_view(const void* data, KvFormat format, MlaDims dims, int64_t num_pages, int64_t page_size,
                       int64_t page_stride_bytes, const float* kv_scale, float kv_scale_value, Device device) {
  KvCacheView kv;
  kv.format = format;
  kv.dims = dims;
  kv.kv_scale = kv_scale;
  kv.kv_scale_value = kv_scale_value;
  const int64_t row_bytes = kv.row_bytes();
  kv.pages.data = const_cast<void*>(data);
  kv.pages.dtype = DType::kUInt8;
  kv.pages.ndim = 3;
  kv.pages.device = device;
  const int64_t shape[] = {num_pages, page_size, row_bytes}, stride[] = {page_stride_bytes, row_bytes, 1};
  for (int d = 0; d < 3; ++d) {
    kv.pages.shape[d] = shape[d];
    kv.pages.stride[d] = stride[d];
  }
  return kv;
}

std::vector<double> half_values(const std::vector<uint16_t>& bits, DType dtype) {
  std::vector<double> v(bits.size());
  for (size_t i = 0; i < bits.size(); ++i) v[i] = oracle_half_to_double(bits[i], dtype);
  return v;
}

float max_abs_v(const float* row, int64_t d_v) {
  float m = 0.0f;
  for (int64_t c = 0; c < d_v; ++c) m = std::max(m, std::fabs(row[c]));
  return m;
}

}  // namespace

double oracle_half_to_double(uint16_t bits, DType dtype) {
  const int sign = bits >> 15;
  double magnitude;
  if (dtype == DType::kBF16) {  // 1.8.7, bias 127
    const int exponent = (bits >> 7) & 0xFF, mantissa = bits & 0x7F;
    if (exponent == 0xFF) magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
    else if (exponent == 0) magnitude = std::ldexp(mantissa / 128.0, -126);
    else magnitude = std::ldexp(1.0 + mantissa / 128.0, exponent - 127);
  } else {  // fp16: 1.5.10, bias 15
    const int exponent = (bits >> 10) & 0x1F, mantissa = bits & 0x3FF;
    if (exponent == 0x1F) magnitude = mantissa ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
    else if (exponent == 0) magnitude = std::ldexp(mantissa / 1024.0, -14);
    else magnitude = std::ldexp(1.0 + mantissa / 1024.0, exponent - 15);
  }
  return sign ? -magnitude : magnitude;
}

void oracle_decode_row(KvFormat format, MlaDims dims, float kv_scale, const uint8_t* row, float* out) {
  const int d_qk = dims.d_qk();
  switch (format) {
    case KvFormat::kBF16:
    case KvFormat::kFP16: {
      const DType dtype = format == KvFormat::kBF16 ? DType::kBF16 : DType::kFP16;
      for (int c = 0; c < d_qk; ++c) out[c] = float(oracle_half_to_double(read_u16(row + 2 * c), dtype));
      return;
    }
    case KvFormat::kFP8E4M3:
      for (int c = 0; c < d_qk; ++c) out[c] = float(oracle_e4m3(row[c]) * double(kv_scale));
      return;
    case KvFormat::kFP8DsMla: {
      // 656 bytes: [0,512) e4m3 kv_c / s_g, [512,528) four float32 s_g (g = i / 128), [528,656) bf16 k_pe.
      constexpr int kDimC = 512, kDimR = 64, kGroup = 128, kScales = 512, kRope = 528;
      for (int c = 0; c < kDimC; ++c) {
        out[c] = float(oracle_e4m3(row[c]) * double(read_f32(row + kScales + 4 * (c / kGroup))));
      }
      for (int c = 0; c < kDimR; ++c) {
        out[kDimC + c] = float(oracle_half_to_double(read_u16(row + kRope + 2 * c), DType::kBF16));
      }
      return;
    }
    case KvFormat::kFP8DsV4:  // not a row format: its tokens are decoded by page (test_ds_v4.cpp)
      for (int c = 0; c < d_qk; ++c) out[c] = NAN;
      return;
  }
}

// ---------------------------------------------------------------- dense decode

/// Pages of c: request b gets ceil(lens[b] / P) pages drawn from a shuffled pool that also holds extra_pages
/// never-used pages, so requests' pages interleave in memory in random order; the block table holds them, then
/// kUnusedPage up to its columns and kTablePadding in the row-stride padding.
static void assign_pages(const std::vector<int32_t>& lens, std::mt19937_64& rng, DecodeCase& c) {
  const DecodeCaseConfig& cfg = c.config;
  const int64_t P = cfg.page_size;
  std::vector<int64_t> pages_of(lens.size());
  int64_t used_pages = 0, max_pages = 0;
  for (size_t b = 0; b < lens.size(); ++b) {
    pages_of[b] = (int64_t(lens[b]) + P - 1) / P;
    used_pages += pages_of[b];
    max_pages = std::max(max_pages, pages_of[b]);
  }
  c.num_pages = used_pages + cfg.extra_pages;
  std::vector<int32_t> pool(static_cast<size_t>(c.num_pages));
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng);
  c.table_columns = std::max<int64_t>(1, max_pages + cfg.extra_table_columns);
  c.table_row_stride = c.table_columns + cfg.table_row_padding;
  c.block_table.assign(size_t(c.batch * c.table_row_stride), kTablePadding);
  size_t next = 0;
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t k = 0; k < c.table_columns; ++k) {
      c.block_table[size_t(b * c.table_row_stride + k)] = k < pages_of[size_t(b)] ? pool[next++] : kUnusedPage;
    }
  }
}

DecodeCase DecodeCase::generate(const DecodeCaseConfig& cfg) {
  DecodeCase c;
  c.config = cfg;
  c.batch = int64_t(cfg.seq_lens.size());
  c.seq_lens = cfg.seq_lens;
  std::mt19937_64 rng(cfg.seed);
  const int64_t P = cfg.page_size, d_qk = cfg.dims.d_qk(), d_v = cfg.dims.d_v();

  assign_pages(cfg.seq_lens, rng, c);

  const KvCacheView view = cache_view(nullptr, cfg.format, cfg.dims, c.num_pages, P, 0, nullptr, cfg.kv_scale,
                                      Device::cpu());
  const int64_t row_bytes = view.row_bytes();
  c.page_stride_bytes = P * row_bytes + cfg.page_padding_bytes;
  c.cache.assign(size_t(c.num_pages * c.page_stride_bytes), kPoisonByte);
  c.kv_rows.resize(size_t(c.batch));
  // Requests in parallel, each with its own generator seeded from (seed, b), so that the rows do not depend on the
  // thread count: writing, encoding and decoding the rows took most of the time of the large GPU test cases (about 2
  // s for 400 requests of up to 700 keys), far more than the reference. Requests own distinct pages.
  reference::parallel_for(c.batch, [&](int64_t b) {
    std::mt19937_64 request_rng(cfg.seed ^ (0x9E3779B97F4A7C15ull * uint64_t(b + 1)));
    const int64_t len = cfg.seq_lens[size_t(b)];
    c.kv_rows[size_t(b)].resize(size_t(len * d_qk));
    for (int64_t t = 0; t < len; ++t) {
      const int64_t page = c.block_table[size_t(b * c.table_row_stride + t / P)];
      uint8_t* row = c.cache.data() + page * c.page_stride_bytes + (t % P) * row_bytes;
      encode_row(view, random_row(request_rng, d_qk, cfg.value_range), row);
      oracle_decode_row(cfg.format, cfg.dims, cfg.kv_scale, row, c.kv_rows[size_t(b)].data() + t * d_qk);
    }
  });

  c.q = random_half(rng, size_t(c.batch * cfg.s_q * cfg.h_q * d_qk), cfg.q_range, cfg.q_dtype);
  c.out.resize(size_t(c.batch * cfg.s_q * cfg.h_q * d_v));
  if (cfg.with_lse) c.lse.resize(size_t(c.batch * cfg.s_q * cfg.h_q));
  c.poison_outputs();
  return c;
}

void DecodeCase::poison_outputs() {
  std::fill(out.begin(), out.end(), kPoison16);
  std::fill(lse.begin(), lse.end(), kNaN);
}

DecodeBuffers DecodeCase::host_buffers() {
  return {q.data(), cache.data(), block_table.data(), seq_lens.data(), out.data(),
          lse.empty() ? nullptr : lse.data(), nullptr,
          k_pe_cache.empty() ? nullptr : k_pe_cache.data(), table_indptr.empty() ? nullptr : table_indptr.data()};
}

DecodeProblem DecodeCase::problem() { return problem(host_buffers(), Device::cpu()); }

DecodeProblem DecodeCase::problem(const DecodeBuffers& at, Device device) const {
  const DecodeCaseConfig& cfg = config;
  DecodeProblem p;
  p.q = TensorView::contiguous(at.q, cfg.q_dtype, {batch, cfg.s_q, cfg.h_q, cfg.dims.d_qk()}, device);
  p.kv = cache_view(at.cache, cfg.format, cfg.dims, num_pages, cfg.page_size, page_stride_bytes, at.kv_scale,
                    cfg.kv_scale, device);
  if (table_indptr.empty()) {
    p.block_table = TensorView::contiguous(at.block_table, DType::kInt32, {batch, table_columns}, device);
    p.block_table.stride[0] = table_row_stride;
  } else {
    p.block_table = TensorView::contiguous(at.block_table, DType::kInt32, {int64_t(block_table.size())}, device);
    p.block_table_indptr = TensorView::contiguous(at.block_table_indptr, DType::kInt32, {batch + 1}, device);
  }
  if (!k_pe_cache.empty()) {
    const int64_t e = kv_element_bytes(cfg.format), d_c = cfg.dims.d_c;
    p.kv.pages.shape[2] = p.kv.pages.stride[1] = d_c * e;  // kv_c rows packed back to back in each page
    p.kv.k_pe = TensorView::contiguous(at.k_pe_cache, DType::kUInt8, {num_pages, cfg.page_size, cfg.dims.d_r * e},
                                       device);
    p.kv.k_pe.stride[0] = k_pe_page_stride;
    p.kv.k_pe.stride[1] = k_pe_row_stride;
  }
  p.seq_lens = TensorView::contiguous(at.seq_lens, DType::kInt32, {batch}, device);
  p.out = TensorView::contiguous(at.out, cfg.q_dtype, {batch, cfg.s_q, cfg.h_q, cfg.dims.d_v()}, device);
  if (cfg.with_lse) p.lse = TensorView::contiguous(at.lse, DType::kFP32, {batch, cfg.s_q, cfg.h_q}, device);
  p.softmax_scale = cfg.softmax_scale;
  p.causal = cfg.causal;
  p.shard = cfg.shard;
  return p;
}

DecodeCase shard_case(const DecodeCase& whole, ContextShard shard, uint64_t seed) {
  const DecodeCaseConfig& cfg = whole.config;
  DecodeCase c = whole;
  c.config.shard = shard;
  std::mt19937_64 rng(seed);
  const int64_t P = cfg.page_size;
  std::vector<int32_t> local_lens(size_t(c.batch));
  for (int64_t b = 0; b < c.batch; ++b) local_lens[size_t(b)] = int32_t(shard.owned_before(whole.seq_lens[size_t(b)]));
  assign_pages(local_lens, rng, c);
  const int64_t row_bytes = cache_view(nullptr, cfg.format, cfg.dims, 1, P, 0, nullptr, cfg.kv_scale, Device::cpu())
                                .row_bytes();
  c.cache.assign(size_t(c.num_pages * c.page_stride_bytes), kPoisonByte);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t t = 0; t < whole.seq_lens[size_t(b)]; ++t) {
      if (shard.owner(t) != shard.rank) continue;
      const int64_t k = shard.local_index(t);
      const int64_t from = whole.block_table[size_t(b * whole.table_row_stride + t / P)];
      const int64_t to = c.block_table[size_t(b * c.table_row_stride + k / P)];
      std::memcpy(c.cache.data() + to * c.page_stride_bytes + (k % P) * row_bytes,
                  whole.cache.data() + from * whole.page_stride_bytes + (t % P) * row_bytes, size_t(row_bytes));
    }
  }
  c.poison_outputs();
  return c;
}

DecodeCase split_case(const DecodeCase& whole, bool split_cache, bool flat_table) {
  const DecodeCaseConfig& cfg = whole.config;
  if (cfg.shard.sharded()) std::abort();  // the page counts below are the unsharded ones: not for shard_case() output
  DecodeCase c = whole;
  const int64_t P = cfg.page_size;
  if (split_cache) {
    constexpr int64_t kPadding = 16;  // poisoned bytes after every k_pe row and after every page of either part
    const int64_t e = kv_element_bytes(cfg.format);
    const int64_t row_bytes = e * cfg.dims.d_qk(), c_bytes = e * cfg.dims.d_c, r_bytes = e * cfg.dims.d_r;
    c.page_stride_bytes = P * c_bytes + kPadding;
    c.k_pe_row_stride = r_bytes + kPadding;
    c.k_pe_page_stride = P * c.k_pe_row_stride + kPadding;
    c.cache.assign(size_t(c.num_pages * c.page_stride_bytes), kPoisonByte);
    c.k_pe_cache.assign(size_t(c.num_pages * c.k_pe_page_stride), kPoisonByte);
    for (int64_t page = 0; page < c.num_pages; ++page) {  // poisoned rows stay poisoned in both parts
      for (int64_t t = 0; t < P; ++t) {
        const uint8_t* row = whole.cache.data() + page * whole.page_stride_bytes + t * row_bytes;
        std::memcpy(c.cache.data() + page * c.page_stride_bytes + t * c_bytes, row, size_t(c_bytes));
        std::memcpy(c.k_pe_cache.data() + page * c.k_pe_page_stride + t * c.k_pe_row_stride, row + c_bytes,
                    size_t(r_bytes));
      }
    }
  }
  if (flat_table) {
    c.block_table.clear();
    c.table_indptr.assign(1, 0);
    for (int64_t b = 0; b < c.batch; ++b) {
      const int64_t used = (int64_t(c.seq_lens[size_t(b)]) + P - 1) / P;
      for (int64_t k = 0; k < used; ++k) c.block_table.push_back(whole.block_table[size_t(b * whole.table_row_stride + k)]);
      c.block_table.push_back(kUnusedPage);  // one entry the request owns and must not read
      c.table_indptr.push_back(int32_t(c.block_table.size()));
    }
  }
  c.poison_outputs();
  return c;
}

std::vector<float> DecodeCase::out_floats() const { return to_floats(out, config.q_dtype); }

std::vector<double> DecodeCase::q_values() const { return half_values(q, config.q_dtype); }

float DecodeCase::request_vmax(int64_t b) const {
  const int64_t d_qk = config.dims.d_qk(), len = config.seq_lens[size_t(b)];
  float m = 0.0f;
  for (int64_t t = 0; t < len; ++t) m = std::max(m, max_abs_v(kv_rows[size_t(b)].data() + t * d_qk, config.dims.d_v()));
  return m;
}

std::vector<float> DecodeCase::row_vmax() const {
  std::vector<float> v;
  for (int64_t b = 0; b < batch; ++b) v.insert(v.end(), size_t(config.s_q * config.h_q), request_vmax(b));
  return v;
}

// ---------------------------------------------------------------- sparse decode

SparseCase SparseCase::generate(const SparseCaseConfig& cfg) {
  SparseCase c;
  c.config = cfg;
  std::mt19937_64 rng(cfg.seed);
  const int64_t d_qk = cfg.dims.d_qk(), d_v = cfg.dims.d_v(), num_rows = cfg.num_pages * cfg.page_size;
  const KvCacheView view = cache_view(nullptr, cfg.format, cfg.dims, cfg.num_pages, cfg.page_size, 0, nullptr,
                                      cfg.kv_scale, Device::cpu());
  const int64_t row_bytes = view.row_bytes();

  // Written rows are a random subset; the rest stay poisoned and are only referenced past topk_length.
  std::vector<int32_t> ids(static_cast<size_t>(num_rows));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  const size_t n_written = std::clamp<size_t>(size_t(cfg.written_fraction * double(num_rows)), 1, ids.size());
  const std::vector<int32_t> written(ids.begin(), ids.begin() + n_written);
  const std::vector<int32_t> poisoned(ids.begin() + n_written, ids.end());

  c.cache.assign(size_t(num_rows * row_bytes), kPoisonByte);
  c.row_values.assign(size_t(num_rows * d_qk), kNaN);
  for (int32_t id : written) {
    uint8_t* row = c.cache.data() + int64_t(id) * row_bytes;
    encode_row(view, random_row(rng, d_qk, cfg.value_range), row);
    oracle_decode_row(cfg.format, cfg.dims, cfg.kv_scale, row, c.row_values.data() + int64_t(id) * d_qk);
  }

  // Used columns: a written row (drawn with replacement, so duplicates occur) or, with probability
  // invalid_fraction, one of several negative ids. Ignored columns: a poisoned row when there is one.
  constexpr int32_t kNegativeIds[] = {-1, -2, -7, INT32_MIN};
  c.topk_length = cfg.topk_length;
  c.indices.resize(size_t(cfg.batch * cfg.s_q * cfg.topk));
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_int_distribution<size_t> pick_written(0, written.size() - 1);
  std::uniform_int_distribution<size_t> pick_negative(0, std::size(kNegativeIds) - 1);
  for (int64_t b = 0; b < cfg.batch; ++b) {
    const int64_t used = c.used_columns(b);
    for (int64_t i = 0; i < cfg.s_q; ++i) {
      for (int64_t k = 0; k < cfg.topk; ++k) {
        int32_t id;
        if (k >= used) {
          id = poisoned.empty() ? kUnusedPage : poisoned[size_t(k) % poisoned.size()];
        } else if (unit(rng) < cfg.invalid_fraction) {
          id = kNegativeIds[pick_negative(rng)];
        } else {
          id = written[pick_written(rng)];
        }
        c.indices[size_t((b * cfg.s_q + i) * cfg.topk + k)] = id;
      }
    }
  }
  c.attn_sink = cfg.attn_sink;
  c.q = random_half(rng, size_t(cfg.batch * cfg.s_q * cfg.h_q * d_qk), cfg.q_range, cfg.q_dtype);
  c.out.resize(size_t(cfg.batch * cfg.s_q * cfg.h_q * d_v));
  if (cfg.with_lse) c.lse.resize(size_t(cfg.batch * cfg.s_q * cfg.h_q));
  c.poison_outputs();
  return c;
}

int64_t SparseCase::used_columns(int64_t b) const {
  return topk_length.empty() ? config.topk : std::clamp<int64_t>(topk_length[size_t(b)], 0, config.topk);
}

void SparseCase::poison_outputs() {
  std::fill(out.begin(), out.end(), kPoison16);
  std::fill(lse.begin(), lse.end(), kNaN);
}

SparseBuffers SparseCase::host_buffers() {
  return {q.data(),
          cache.data(),
          indices.data(),
          topk_length.empty() ? nullptr : topk_length.data(),
          attn_sink.empty() ? nullptr : attn_sink.data(),
          out.data(),
          lse.empty() ? nullptr : lse.data(),
          nullptr};
}

SparseDecodeProblem SparseCase::problem() { return problem(host_buffers(), Device::cpu()); }

SparseDecodeProblem SparseCase::problem(const SparseBuffers& at, Device device) const {
  const SparseCaseConfig& cfg = config;
  const int64_t row_bytes = kv_row_bytes(cfg.format, cfg.dims.d_c, cfg.dims.d_r);
  SparseDecodeProblem p;
  p.q = TensorView::contiguous(at.q, cfg.q_dtype, {cfg.batch, cfg.s_q, cfg.h_q, cfg.dims.d_qk()}, device);
  p.kv = cache_view(at.cache, cfg.format, cfg.dims, cfg.num_pages, cfg.page_size, cfg.page_size * row_bytes,
                    at.kv_scale, cfg.kv_scale, device);
  p.indices = TensorView::contiguous(at.indices, DType::kInt32, {cfg.batch, cfg.s_q, cfg.topk}, device);
  if (!topk_length.empty()) p.topk_length = TensorView::contiguous(at.topk_length, DType::kInt32, {cfg.batch}, device);
  if (!attn_sink.empty()) p.attn_sink = TensorView::contiguous(at.attn_sink, DType::kFP32, {cfg.h_q}, device);
  p.out = TensorView::contiguous(at.out, cfg.q_dtype, {cfg.batch, cfg.s_q, cfg.h_q, cfg.dims.d_v()}, device);
  if (cfg.with_lse) p.lse = TensorView::contiguous(at.lse, DType::kFP32, {cfg.batch, cfg.s_q, cfg.h_q}, device);
  p.softmax_scale = cfg.softmax_scale;
  return p;
}

std::vector<float> SparseCase::out_floats() const { return to_floats(out, config.q_dtype); }

std::vector<double> SparseCase::q_values() const { return half_values(q, config.q_dtype); }

std::vector<float> SparseCase::row_vmax() const {
  const int64_t d_qk = config.dims.d_qk();
  std::vector<float> v;
  for (int64_t b = 0; b < config.batch; ++b) {
    for (int64_t i = 0; i < config.s_q; ++i) {
      float m = 0.0f;
      for (int64_t k = 0; k < used_columns(b); ++k) {
        const int32_t id = indices[size_t((b * config.s_q + i) * config.topk + k)];
        if (id >= 0) m = std::max(m, max_abs_v(row_values.data() + int64_t(id) * d_qk, config.dims.d_v()));
      }
      v.insert(v.end(), size_t(config.h_q), m);
    }
  }
  return v;
}

}  // namespace mlakit::test
