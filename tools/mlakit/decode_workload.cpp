#include "decode_workload.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "mlakit/numeric.h"
#include "random_fill.h"

namespace mlakit::cli {
namespace {

constexpr MlaDims kDims{};
constexpr uint8_t kPoisonByte = 0xff;  // NaN in bf16, fp16 and float32: an unwritten output shows up

}  // namespace

void compare_sample(const std::vector<uint16_t>& out, const std::vector<uint16_t>& ref, const std::vector<float>& lse,
                    const std::vector<float>& ref_lse, double vmax, SampleCheck* result) {
  for (size_t i = 0; i < out.size(); ++i) {
    const double o = bf16_to_float(out[i]), e = bf16_to_float(ref[i]);
    const double err = std::isfinite(o) ? std::fabs(o - e) : INFINITY;
    const double tol = std::ldexp(vmax, -8) + std::ldexp(std::fabs(e), -6);
    result->max_abs_err = std::max(result->max_abs_err, err);
    result->worst_ratio = std::max(result->worst_ratio, err / tol);
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    const bool both_empty = std::isinf(ref_lse[i]) && ref_lse[i] < 0 && lse[i] == ref_lse[i];
    const double tol = 1e-4 + 1e-4 * std::fabs(ref_lse[i]);
    if (!both_empty && !(std::fabs(double(lse[i]) - ref_lse[i]) <= tol)) result->lse_ok = false;
  }
  ++result->requests;
}

Status cache_vmax(const Backend& reference, const void* cache, KvFormat format, MlaDims dims, int64_t rows,
                  int64_t page_size, double* vmax) {
  const int64_t pages = std::max<int64_t>(1, (rows + page_size - 1) / page_size);
  std::vector<int32_t> table(static_cast<size_t>(pages));
  std::iota(table.begin(), table.end(), 0);
  const int32_t len = int32_t(rows);
  const int32_t cu[2] = {0, len};
  std::vector<uint16_t> values;
  const size_t count = size_t(rows) * size_t(dims.d_qk());
  MLAKIT_TRY(host_allocation("gathered rows (host)", count * 2, [&] { values.resize(count); }));
  GatherKvProblem g;
  g.cache = KvCacheView::contiguous(const_cast<void*>(cache), format, pages, page_size, dims);
  g.cache.kv_scale_value = kBenchKvScale;
  g.block_table = TensorView::contiguous(table.data(), DType::kInt32, {1, pages});
  g.seq_lens = TensorView::contiguous(&len, DType::kInt32, {1});
  g.cu_out = TensorView::contiguous(cu, DType::kInt32, {2});
  g.out = TensorView::contiguous(values.data(), DType::kBF16, {rows, dims.d_qk()});
  MLAKIT_TRY(reference.run(g, nullptr));
  *vmax = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    if (int64_t(i) % dims.d_qk() < dims.d_v()) *vmax = std::max(*vmax, double(std::fabs(bf16_to_float(values[i]))));
  }
  return {};
}

Status DecodeWorkload::create(const DecodeSpec& spec, DeviceMemory* mem, uint64_t seed,
                              std::unique_ptr<DecodeWorkload>* out) {
  // Everything the spec describes is checked before the first byte is allocated.
  DecodeLayout l;
  MLAKIT_TRY(check_decode_spec(spec, &l));
  std::unique_ptr<DecodeWorkload> w(new DecodeWorkload(spec, mem));
  w->pages_per_req_ = l.pages_per_req;
  const int64_t b = spec.batch, p = spec.page_size, num_pages = l.num_pages;

  MLAKIT_TRY(allocate_buffer(mem, &w->q_, size_t(l.q_bytes), "q"));
  MLAKIT_TRY(allocate_buffer(mem, &w->cache_, size_t(l.cache_bytes), "kv cache"));
  MLAKIT_TRY(allocate_buffer(mem, &w->block_table_, size_t(l.table_bytes), "block_table"));
  MLAKIT_TRY(allocate_buffer(mem, &w->seq_lens_, size_t(l.lens_bytes), "seq_lens"));
  MLAKIT_TRY(allocate_buffer(mem, &w->out_, size_t(l.out_bytes), "out"));
  MLAKIT_TRY(allocate_buffer(mem, &w->lse_, size_t(l.lse_bytes), "lse"));
  MLAKIT_TRY(allocate_buffer(mem, &w->kv_scale_, sizeof(float), "kv_scale"));

  MLAKIT_TRY(mem->fill_random_bf16(w->q_.get(), l.q_bytes / 2, seed, Inputs::kUniform));
  MLAKIT_TRY(mem->fill_random_cache(w->cache_.get(), num_pages, p, spec.format, kDims.d_c, kDims.d_r, seed + 1));
  MLAKIT_TRY(mem->fill_bytes(w->out_.get(), kPoisonByte, w->out_.bytes()));
  MLAKIT_TRY(mem->fill_bytes(w->lse_.get(), kPoisonByte, w->lse_.bytes()));

  // Every request owns distinct pages, in shuffled order (as a long-running server's allocator leaves them).
  std::vector<int32_t> lens;
  MLAKIT_TRY(host_allocation("block_table (host)", size_t(l.table_bytes), [&] {
    w->block_table_host_.resize(size_t(num_pages));
  }));
  MLAKIT_TRY(host_allocation("seq_lens (host)", size_t(l.lens_bytes), [&] { lens.assign(size_t(b), int32_t(spec.ctx)); }));
  std::iota(w->block_table_host_.begin(), w->block_table_host_.end(), 0);
  std::shuffle(w->block_table_host_.begin(), w->block_table_host_.end(), std::mt19937_64(seed + 2));
  MLAKIT_TRY(mem->upload(w->block_table_.get(), w->block_table_host_.data(), w->block_table_.bytes()));
  MLAKIT_TRY(mem->upload(w->seq_lens_.get(), lens.data(), w->seq_lens_.bytes()));
  const float scale = kBenchKvScale;
  MLAKIT_TRY(mem->upload(w->kv_scale_.get(), &scale, sizeof scale));

  const DecodeBuffers buffers{w->q_.get(), w->cache_.get(), w->block_table_.get(),
                              w->seq_lens_.get(), w->out_.get(), w->lse_.get()};
  w->problem_ = make_decode_problem(spec, l, buffers, mem->device());
  if (spec.format == KvFormat::kFP8E4M3) w->problem_.kv.kv_scale = static_cast<const float*>(w->kv_scale_.get());
  *out = std::move(w);
  return {};
}

Status DecodeWorkload::check_sample(const Backend& reference, SampleCheck* result) const {
  const int64_t b = spec_.batch, s_q = spec_.s_q, h_q = spec_.h_q, p = spec_.page_size;
  const int64_t row_bytes = kv_row_bytes(spec_.format, kDims.d_c, kDims.d_r);
  const int64_t page_bytes = p * row_bytes, q_row = s_q * h_q * kDims.d_qk(), o_row = s_q * h_q * kDims.d_v();
  std::vector<int64_t> sample = {0};
  if (b > 1) sample.push_back(b - 1);
  *result = SampleCheck{};
  for (int64_t r : sample) {
    // One request, copied to the host with its pages renumbered 0..n-1.
    std::vector<uint8_t> pages;
    const size_t pages_bytes = size_t(pages_per_req_ * page_bytes);
    MLAKIT_TRY(host_allocation("sampled request's pages (host)", pages_bytes, [&] { pages.resize(pages_bytes); }));
    for (int64_t i = 0; i < pages_per_req_; ++i) {
      const int64_t page = block_table_host_[size_t(r * pages_per_req_ + i)];
      MLAKIT_TRY(mem_->download(pages.data() + i * page_bytes,
                                static_cast<const uint8_t*>(cache_.get()) + page * page_bytes, size_t(page_bytes)));
    }
    std::vector<uint16_t> q(static_cast<size_t>(q_row)), out(static_cast<size_t>(o_row)), ref(static_cast<size_t>(o_row));
    std::vector<float> lse(size_t(s_q * h_q)), ref_lse(size_t(s_q * h_q));
    MLAKIT_TRY(mem_->download(q.data(), static_cast<const uint16_t*>(q_.get()) + r * q_row, q.size() * 2));
    MLAKIT_TRY(mem_->download(out.data(), static_cast<const uint16_t*>(out_.get()) + r * o_row, out.size() * 2));
    MLAKIT_TRY(mem_->download(lse.data(), static_cast<const float*>(lse_.get()) + r * s_q * h_q, lse.size() * 4));
    std::vector<int32_t> table(static_cast<size_t>(pages_per_req_));
    std::iota(table.begin(), table.end(), 0);
    const int32_t len = int32_t(spec_.ctx);

    DecodeProblem host;
    host.q = TensorView::contiguous(q.data(), DType::kBF16, {1, s_q, h_q, kDims.d_qk()});
    host.kv = KvCacheView::contiguous(pages.data(), spec_.format, pages_per_req_, p, kDims);
    host.kv.kv_scale_value = kBenchKvScale;
    host.block_table = TensorView::contiguous(table.data(), DType::kInt32, {1, pages_per_req_});
    host.seq_lens = TensorView::contiguous(&len, DType::kInt32, {1});
    host.out = TensorView::contiguous(ref.data(), DType::kBF16, {1, s_q, h_q, kDims.d_v()});
    host.lse = TensorView::contiguous(ref_lse.data(), DType::kFP32, {1, s_q, h_q});
    host.softmax_scale = spec_.softmax_scale;
    host.causal = spec_.causal;
    MLAKIT_TRY(reference.run(host, Workspace{}, nullptr));

    double vmax = 0;
    MLAKIT_TRY(cache_vmax(reference, pages.data(), spec_.format, kDims, int64_t(len), p, &vmax));
    compare_sample(out, ref, lse, ref_lse, vmax, result);
  }
  return {};
}

}  // namespace mlakit::cli
