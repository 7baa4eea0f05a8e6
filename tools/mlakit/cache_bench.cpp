#include "cache_bench.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "mlakit/rope.h"
#include "random_fill.h"
#include "selection_error.h"

namespace mlakit::cli {
namespace {

constexpr MlaDims kDims{};
constexpr int64_t kCapacityPerToken = 2;  // append: slots spread over twice as many rows
constexpr int64_t kPromptLength = 4096;   // append --rope: positions of consecutive prompts
constexpr uint8_t kCachePattern = 0x5a;   // append: bytes outside the written rows must keep it
constexpr uint64_t kSeed = 4242;

template <typename T>
Status upload_vector(DeviceMemory* mem, Buffer* buf, const std::vector<T>& v, const char* what) {
  MLAKIT_TRY(allocate_buffer(mem, buf, v.size() * sizeof(T), what));
  return mem->upload(buf->get(), v.data(), v.size() * sizeof(T));
}

template <typename Problem>
Status time_op(const Backend& be, const Problem& p, DeviceMemory* mem, int64_t iters, double* median_ms) {
  std::vector<double> times;
  for (int64_t i = 0; i < iters; ++i) {
    double ms = 0;
    MLAKIT_TRY(mem->flush_cache());
    MLAKIT_TRY(mem->time_ms([&] { return be.run(p, mem->stream()); }, &ms));
    times.push_back(ms);
  }
  *median_ms = median(times);
  return {};
}

int64_t count_mismatches(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  int64_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

/// Appends `tokens` random bf16 rows at random distinct slots; compares the whole cache with the reference's.
Status bench_append(const CacheBenchSpec& s, const Registry& registry, const Preference& pref, DeviceMemory* mem,
                    int64_t iters, CacheBenchResult* r) {
  const int64_t t = s.tokens, p = s.page_size, row_bytes = kv_row_bytes(s.format, kDims.d_c, kDims.d_r);
  const int64_t num_pages = (t * kCapacityPerToken + p - 1) / p;
  const size_t cache_bytes = size_t(num_pages * p * row_bytes);
  std::vector<int64_t> slots(static_cast<size_t>(num_pages * p));
  std::iota(slots.begin(), slots.end(), 0);
  std::shuffle(slots.begin(), slots.end(), std::mt19937_64(kSeed));
  slots.resize(static_cast<size_t>(t));
  std::vector<int64_t> positions(static_cast<size_t>(t));
  for (int64_t i = 0; i < t; ++i) positions[size_t(i)] = i % kPromptLength;
  const std::vector<float> cos_sin = yarn_cos_sin_table(YarnConfig{}, kPromptLength);
  const float kv_scale = kBenchKvScale;

  Buffer kv_c, k_pe, cache, slot_buf, pos_buf, table_buf, scale_buf;
  MLAKIT_TRY(allocate_buffer(mem, &kv_c, size_t(t * kDims.d_c) * 2, "kv_c"));
  MLAKIT_TRY(allocate_buffer(mem, &k_pe, size_t(t * kDims.d_r) * 2, "k_pe"));
  MLAKIT_TRY(allocate_buffer(mem, &cache, cache_bytes, "kv cache"));
  MLAKIT_TRY(mem->fill_random_bf16(kv_c.get(), t * kDims.d_c, kSeed + 1, Inputs::kUniform));
  MLAKIT_TRY(mem->fill_random_bf16(k_pe.get(), t * kDims.d_r, kSeed + 2, Inputs::kUniform));
  MLAKIT_TRY(mem->fill_bytes(cache.get(), kCachePattern, cache_bytes));
  MLAKIT_TRY(upload_vector(mem, &slot_buf, slots, "slot_mapping"));
  MLAKIT_TRY(upload_vector(mem, &pos_buf, positions, "positions"));
  MLAKIT_TRY(upload_vector(mem, &table_buf, cos_sin, "cos_sin"));
  MLAKIT_TRY(upload_vector(mem, &scale_buf, std::vector<float>{kv_scale}, "kv_scale"));

  const Device dev = mem->device();
  AppendKvProblem pr;
  pr.kv_c = TensorView::contiguous(kv_c.get(), DType::kBF16, {t, kDims.d_c}, dev);
  pr.k_pe = TensorView::contiguous(k_pe.get(), DType::kBF16, {t, kDims.d_r}, dev);
  pr.slot_mapping = TensorView::contiguous(slot_buf.get(), DType::kInt64, {t}, dev);
  pr.cache = KvCacheView::contiguous(cache.get(), s.format, num_pages, p, kDims, dev);
  if (s.format == KvFormat::kFP8E4M3) pr.cache.kv_scale = static_cast<const float*>(scale_buf.get());
  if (s.rope) {
    pr.positions = TensorView::contiguous(pos_buf.get(), DType::kInt64, {t}, dev);
    pr.cos_sin = TensorView::contiguous(table_buf.get(), DType::kFP32, {kPromptLength, kDims.d_r}, dev);
  }
  const Selection sel = registry.select(pr, pref);
  if (!sel.backend) return selection_error(sel);
  r->backend = sel.backend->name();
  MLAKIT_TRY(sel.backend->run(pr, mem->stream()));

  // The reference on host copies of the same inputs, starting from the same pattern.
  std::vector<uint16_t> kv_c_h(static_cast<size_t>(t * kDims.d_c)), k_pe_h(static_cast<size_t>(t * kDims.d_r));
  std::vector<uint8_t> got(cache_bytes), want(cache_bytes, kCachePattern);
  MLAKIT_TRY(mem->download(kv_c_h.data(), kv_c.get(), kv_c.bytes()));
  MLAKIT_TRY(mem->download(k_pe_h.data(), k_pe.get(), k_pe.bytes()));
  MLAKIT_TRY(mem->download(got.data(), cache.get(), cache_bytes));
  AppendKvProblem host = pr;
  host.kv_c = TensorView::contiguous(kv_c_h.data(), DType::kBF16, {t, kDims.d_c});
  host.k_pe = TensorView::contiguous(k_pe_h.data(), DType::kBF16, {t, kDims.d_r});
  host.slot_mapping = TensorView::contiguous(slots.data(), DType::kInt64, {t});
  host.cache = KvCacheView::contiguous(want.data(), s.format, num_pages, p, kDims);
  host.cache.kv_scale_value = kv_scale;
  if (s.rope) {
    host.positions = TensorView::contiguous(positions.data(), DType::kInt64, {t});
    host.cos_sin = TensorView::contiguous(cos_sin.data(), DType::kFP32, {kPromptLength, kDims.d_r});
  }
  MLAKIT_TRY(registry.get("reference")->run(host, nullptr));
  r->bytes_compared = int64_t(cache_bytes);
  r->mismatches = count_mismatches(got, want);
  return time_op(*sel.backend, pr, mem, iters, &r->median_ms);
}

/// Gathers `rows` rows of `requests` equal requests through a shuffled block table; compares the first and
/// last request's rows with the reference's, bit for bit.
Status bench_gather(const CacheBenchSpec& s, const Registry& registry, const Preference& pref, DeviceMemory* mem,
                    int64_t iters, CacheBenchResult* r) {
  const int64_t b = s.requests, len = s.rows / s.requests, p = s.page_size, d_qk = kDims.d_qk();
  const int64_t row_bytes = kv_row_bytes(s.format, kDims.d_c, kDims.d_r);
  const int64_t pages_per_req = (len + p - 1) / p, num_pages = b * pages_per_req, total = b * len;
  std::vector<int32_t> table(static_cast<size_t>(num_pages)), lens(static_cast<size_t>(b), int32_t(len)), cu(static_cast<size_t>(b + 1));
  std::iota(table.begin(), table.end(), 0);
  std::shuffle(table.begin(), table.end(), std::mt19937_64(kSeed));
  for (int64_t i = 0; i <= b; ++i) cu[size_t(i)] = int32_t(i * len);

  Buffer cache, out, table_buf, lens_buf, cu_buf, scale_buf;
  MLAKIT_TRY(allocate_buffer(mem, &cache, size_t(num_pages * p * row_bytes), "kv cache"));
  MLAKIT_TRY(allocate_buffer(mem, &out, size_t(total * d_qk) * 2, "out"));
  MLAKIT_TRY(mem->fill_random_cache(cache.get(), num_pages, p, s.format, kDims.d_c, kDims.d_r, kSeed));
  MLAKIT_TRY(upload_vector(mem, &table_buf, table, "block_table"));
  MLAKIT_TRY(upload_vector(mem, &lens_buf, lens, "seq_lens"));
  MLAKIT_TRY(upload_vector(mem, &cu_buf, cu, "cu_out"));
  MLAKIT_TRY(upload_vector(mem, &scale_buf, std::vector<float>{kBenchKvScale}, "kv_scale"));

  const Device dev = mem->device();
  GatherKvProblem pr;
  pr.cache = KvCacheView::contiguous(cache.get(), s.format, num_pages, p, kDims, dev);
  if (s.format == KvFormat::kFP8E4M3) pr.cache.kv_scale = static_cast<const float*>(scale_buf.get());
  pr.block_table = TensorView::contiguous(table_buf.get(), DType::kInt32, {b, pages_per_req}, dev);
  pr.seq_lens = TensorView::contiguous(lens_buf.get(), DType::kInt32, {b}, dev);
  pr.cu_out = TensorView::contiguous(cu_buf.get(), DType::kInt32, {b + 1}, dev);
  pr.out = TensorView::contiguous(out.get(), DType::kBF16, {total, d_qk}, dev);
  const Selection sel = registry.select(pr, pref);
  if (!sel.backend) return selection_error(sel);
  r->backend = sel.backend->name();
  MLAKIT_TRY(sel.backend->run(pr, mem->stream()));

  for (int64_t req : {int64_t(0), b - 1}) {  // one request at a time, its pages renumbered 0..n-1
    const int64_t page_bytes = p * row_bytes, out_bytes = len * d_qk * 2;
    std::vector<uint8_t> pages(static_cast<size_t>(pages_per_req * page_bytes)), got(static_cast<size_t>(out_bytes)), want(static_cast<size_t>(out_bytes));
    for (int64_t i = 0; i < pages_per_req; ++i) {
      const int64_t page = table[size_t(req * pages_per_req + i)];
      MLAKIT_TRY(mem->download(pages.data() + i * page_bytes, static_cast<const uint8_t*>(cache.get()) + page * page_bytes,
                               size_t(page_bytes)));
    }
    MLAKIT_TRY(mem->download(got.data(), static_cast<const uint8_t*>(out.get()) + req * out_bytes, size_t(out_bytes)));
    std::vector<int32_t> own(static_cast<size_t>(pages_per_req));
    std::iota(own.begin(), own.end(), 0);
    const int32_t one_len = int32_t(len), one_cu[2] = {0, int32_t(len)};
    GatherKvProblem host;
    host.cache = KvCacheView::contiguous(pages.data(), s.format, pages_per_req, p, kDims);
    host.cache.kv_scale_value = kBenchKvScale;
    host.block_table = TensorView::contiguous(own.data(), DType::kInt32, {1, pages_per_req});
    host.seq_lens = TensorView::contiguous(&one_len, DType::kInt32, {1});
    host.cu_out = TensorView::contiguous(one_cu, DType::kInt32, {2});
    host.out = TensorView::contiguous(want.data(), DType::kBF16, {len, d_qk});
    MLAKIT_TRY(registry.get("reference")->run(host, nullptr));
    r->bytes_compared += out_bytes;
    r->mismatches += count_mismatches(got, want);
    if (b == 1) break;
  }
  return time_op(*sel.backend, pr, mem, iters, &r->median_ms);
}

}  // namespace

std::string CacheBenchSpec::describe() const {
  const std::string fmt = std::string(" P=") + std::to_string(page_size) + " kv=" + kv_format_name(format);
  if (append) return "append T=" + std::to_string(tokens) + fmt + (rope ? " +rope" : "");
  return "gather rows=" + std::to_string(rows) + " b=" + std::to_string(requests) + fmt;
}

double CacheBenchSpec::bytes_moved() const {
  const double row = double(kv_row_bytes(format, kDims.d_c, kDims.d_r)), in_row = 2.0 * kDims.d_qk();
  if (append) return double(tokens) * (in_row + row + 8.0 /* slot */ + (rope ? 8.0 /* position */ : 0.0));
  return double(rows / requests * requests) * (row + in_row);
}

CacheBenchResult run_cache_bench(const CacheBenchSpec& spec, const Registry& registry, const Preference& pref,
                                 DeviceMemory* mem, int64_t iters) {
  CacheBenchResult r;
  r.status = spec.append ? bench_append(spec, registry, pref, mem, iters, &r)
                         : bench_gather(spec, registry, pref, mem, iters, &r);
  return r;
}

}  // namespace mlakit::cli
