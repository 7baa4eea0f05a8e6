// FlashMLA's sparse golden vectors through any backend (sparse_golden.h).

#include "common/sparse_golden.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "common/compare.h"
#include "common/golden.h"
#include "common/npy.h"
#include "reference/kv_rows.h"

namespace mlakit::test {
namespace {

constexpr int64_t kDimV = 512;

class HostMemory final : public OperandMemory {
 public:
  void* copy_in(const void* host, size_t bytes) override {
    blocks_.emplace_back(bytes + 16);  // never empty, so every operand has its own address
    if (bytes > 0) std::memcpy(blocks_.back().data(), host, bytes);
    return blocks_.back().data();
  }
  void copy_out(void* host, const void* mem, size_t bytes) override {
    if (bytes > 0) std::memcpy(host, mem, bytes);
  }
  void sync() override {}
  Device device() const override { return Device::cpu(); }

 private:
  std::vector<std::vector<uint8_t>> blocks_;
};

std::string file_path(const SparseGoldenCase& gc, const std::string& file) {
  return sparse_golden_dir() + "/" + gc.name + "/" + file + ".npy";
}
bool has(const SparseGoldenCase& gc, const std::string& file) { return std::filesystem::exists(file_path(gc, file)); }
NpyArray load(const SparseGoldenCase& gc, const std::string& file, const std::string& dtype) {
  NpyArray a;
  std::string error;
  EXPECT_TRUE(load_npy_checked(file_path(gc, file), dtype, {}, &a, &error)) << error;
  return a;
}

/// The cache view FlashMLA's tensor describes: [num_pages, page_bytes] bytes at `data`, P tokens per page.
KvCacheView cache_view(const SparseGoldenCase& gc, void* data, const NpyArray& pages, int64_t page_size, Device dev) {
  const KvFormat format = gc.v4 ? KvFormat::kFP8DsV4 : KvFormat::kFP8DsMla;
  const MlaDims dims = gc.v4 ? MlaDims::deepseek_v4() : MlaDims{};
  KvCacheView kv = KvCacheView::contiguous(data, format, pages.shape[0], page_size, dims, dev);
  kv.pages.stride[0] = pages.shape[1];  // the page bytes as stored (FlashMLA pads pages)
  return kv;
}

}  // namespace

void PrintTo(const SparseGoldenCase& c, std::ostream* os) { *os << c.name; }

std::string sparse_golden_dir() { return std::string(MLAKIT_TESTDATA_DIR) + "/flashmla_sparse"; }

std::vector<SparseGoldenCase> sparse_golden_cases() {
  std::vector<SparseGoldenCase> cases;
  for (const std::string& object : manifest_cases(sparse_golden_dir() + "/manifest.json")) {
    SparseGoldenCase c;
    c.name = string_field(object, "name");
    c.v4 = string_field(object, "layout") == "model1";
    c.page_size = int64_t(number_field(object, "page_size", 0));
    c.extra_page_size = int64_t(number_field(object_field(object, "extra"), "page_size", 0));
    c.softmax_scale = float(number_field(object, "softmax_scale", 0));
    c.has_kv_bf16 = object.find("\"kv_bf16.npy\"") != std::string::npos;
    cases.push_back(c);
  }
  if (cases.empty()) cases.push_back({"missing"});
  return cases;
}

std::vector<SparseGoldenCase> sparse_golden_cases_with_kv_bf16() {
  std::vector<SparseGoldenCase> kept;
  for (const SparseGoldenCase& c : sparse_golden_cases()) {
    if (c.has_kv_bf16 || c.name == "missing") kept.push_back(c);
  }
  if (kept.empty()) kept.push_back({"missing"});
  return kept;
}

std::unique_ptr<OperandMemory> host_memory() { return std::make_unique<HostMemory>(); }

void check_sparse_golden_decode(const SparseGoldenCase& gc, const Backend& be, OperandMemory& mem, bool skip_refusal) {
  if (gc.name == "missing") GTEST_SKIP() << "no golden vectors at " << sparse_golden_dir();
  const Device dev = mem.device();
  NpyArray q = load(gc, "q", "<u2"), cache = load(gc, "kv_cache", "|u1"), idx = load(gc, "indices", "<i4");
  ASSERT_EQ(q.shape.size(), 4u);
  const int64_t b = q.shape[0], s_q = q.shape[1], h_q = q.shape[2], d_qk = q.shape[3];
  ASSERT_EQ(d_qk, gc.v4 ? 512 : 576);
  auto in = [&](const NpyArray& a) { return mem.copy_in(a.data.data(), a.data.size()); };

  SparseDecodeProblem p;
  p.q = TensorView::contiguous(in(q), DType::kBF16, {b, s_q, h_q, d_qk}, dev);
  p.kv = cache_view(gc, in(cache), cache, gc.page_size, dev);
  p.indices = TensorView::contiguous(in(idx), DType::kInt32, {b, s_q, idx.shape[2]}, dev);
  NpyArray topk_length, sink, extra_cache, extra_idx, extra_len;
  if (has(gc, "topk_length")) {
    topk_length = load(gc, "topk_length", "<i4");
    p.topk_length = TensorView::contiguous(in(topk_length), DType::kInt32, {b}, dev);
  }
  if (has(gc, "attn_sink")) {
    sink = load(gc, "attn_sink", "<f4");
    p.attn_sink = TensorView::contiguous(in(sink), DType::kFP32, {h_q}, dev);
  }
  if (has(gc, "extra_indices")) {
    extra_cache = load(gc, "extra_kv_cache", "|u1");
    extra_idx = load(gc, "extra_indices", "<i4");
    p.extra_kv = cache_view(gc, in(extra_cache), extra_cache, gc.extra_page_size, dev);
    p.extra_indices = TensorView::contiguous(in(extra_idx), DType::kInt32, {b, s_q, extra_idx.shape[2]}, dev);
    if (has(gc, "extra_topk_length")) {
      extra_len = load(gc, "extra_topk_length", "<i4");
      p.extra_topk_length = TensorView::contiguous(in(extra_len), DType::kInt32, {b}, dev);
    }
  }
  // Outputs poisoned: every element must be written.
  std::vector<uint16_t> out(size_t(b * s_q * h_q * kDimV), 0xffff);
  std::vector<float> lse(size_t(b * s_q * h_q), NAN);
  void* out_mem = mem.copy_in(out.data(), out.size() * 2);
  void* lse_mem = mem.copy_in(lse.data(), lse.size() * 4);
  p.out = TensorView::contiguous(out_mem, DType::kBF16, {b, s_q, h_q, kDimV}, dev);
  p.lse = TensorView::contiguous(lse_mem, DType::kFP32, {b, s_q, h_q}, dev);
  p.softmax_scale = gc.softmax_scale;
  ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
  const Status sup = be.supports(p);
  if (!sup.ok() && skip_refusal) GTEST_SKIP() << be.name() << " refuses: " << sup.to_string();
  ASSERT_TRUE(sup.ok()) << sup.to_string();
  const size_t ws_bytes = be.workspace_bytes(p);
  const std::vector<uint8_t> ws_poison(ws_bytes + 256, 0xff);  // the caller need not zero the workspace
  void* ws = mem.copy_in(ws_poison.data(), ws_poison.size());
  const Status ran = be.run(p, Workspace{ws, ws_poison.size()}, nullptr);
  ASSERT_TRUE(ran.ok()) << ran.to_string();
  mem.sync();
  mem.copy_out(out.data(), out_mem, out.size() * 2);
  mem.copy_out(lse.data(), lse_mem, lse.size() * 4);

  // vmax per (b, i): the largest |V| over the valid ids of both sets (the tolerance's scale), from the host bytes.
  const KvCacheView host_kv = cache_view(gc, cache.data.data(), cache, gc.page_size, Device::cpu());
  const KvCacheView host_extra = p.has_extra() ? cache_view(gc, extra_cache.data.data(), extra_cache,
                                                            gc.extra_page_size, Device::cpu())
                                               : KvCacheView{};
  std::vector<float> row_vmax, row(static_cast<size_t>(d_qk));
  auto vmax_of = [&](const KvCacheView& kv, const NpyArray& ids, const NpyArray* len, int64_t r, float m) {
    const int64_t topk = ids.shape[2];
    const int64_t used = len ? std::clamp<int64_t>(len->at<int32_t>(r / s_q), 0, topk) : topk;
    for (int64_t k = 0; k < used; ++k) {
      const int32_t id = ids.at<int32_t>(r * topk + k);
      if (id < 0) continue;
      reference::decode_kv_token(kv, id / kv.page_size(), id % kv.page_size(), row.data());
      for (int64_t c = 0; c < kDimV; ++c) m = std::max(m, std::fabs(row[size_t(c)]));
    }
    return m;
  };
  for (int64_t r = 0; r < b * s_q; ++r) {
    float m = vmax_of(host_kv, idx, p.topk_length.defined() ? &topk_length : nullptr, r, 0.0f);
    if (p.has_extra()) m = vmax_of(host_extra, extra_idx, p.extra_topk_length.defined() ? &extra_len : nullptr, r, m);
    row_vmax.insert(row_vmax.end(), size_t(h_q), m);
  }
  const NpyArray golden_out = load(gc, "out", "<u2"), golden_lse = load(gc, "lse", "<f4");
  ASSERT_EQ(golden_out.numel(), int64_t(out.size())) << golden_out.shape_string();
  EXPECT_TRUE(check_out(to_floats(out, DType::kBF16), to_floats(golden_out.to_vector<uint16_t>(), DType::kBF16),
                        row_vmax, kDimV, DType::kBF16));
  EXPECT_TRUE(check_lse(lse, native_lse(golden_lse)));
}

void check_sparse_golden_append(const SparseGoldenCase& gc, const Backend& be, OperandMemory& mem) {
  if (gc.name == "missing") GTEST_SKIP() << "no golden vectors at " << sparse_golden_dir();
  const Device dev = mem.device();
  const NpyArray golden = load(gc, "kv_cache", "|u1"), rows = load(gc, "kv_bf16", "<u2");
  const int64_t tokens = rows.shape[0] * rows.shape[1];
  const std::vector<uint16_t> values = rows.to_vector<uint16_t>();  // [T, 512]: kv_c (448) then k_pe (64)
  std::vector<uint16_t> kv_c, k_pe;
  for (int64_t t = 0; t < tokens; ++t) {
    kv_c.insert(kv_c.end(), values.begin() + t * 512, values.begin() + t * 512 + 448);
    k_pe.insert(k_pe.end(), values.begin() + t * 512 + 448, values.begin() + (t + 1) * 512);
  }
  std::vector<int64_t> slots(static_cast<size_t>(tokens));
  for (int64_t t = 0; t < tokens; ++t) slots[size_t(t)] = t;
  const std::vector<uint8_t> zeros(golden.data.size(), 0);
  void* cache_mem = mem.copy_in(zeros.data(), zeros.size());
  AppendKvProblem a;
  a.kv_c = TensorView::contiguous(mem.copy_in(kv_c.data(), kv_c.size() * 2), DType::kBF16, {tokens, 448}, dev);
  a.k_pe = TensorView::contiguous(mem.copy_in(k_pe.data(), k_pe.size() * 2), DType::kBF16, {tokens, 64}, dev);
  a.slot_mapping = TensorView::contiguous(mem.copy_in(slots.data(), slots.size() * 8), DType::kInt64, {tokens}, dev);
  a.cache = cache_view(gc, cache_mem, golden, gc.page_size, dev);
  ASSERT_TRUE(a.validate().ok()) << a.validate().to_string();
  const Status st = be.run(a, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  mem.sync();
  std::vector<uint8_t> written(golden.data.size());
  mem.copy_out(written.data(), cache_mem, written.size());
  int64_t differing = 0, first = -1;
  for (size_t i = 0; i < golden.data.size(); ++i) {
    if (golden.data[i] != written[i] && differing++ == 0) first = int64_t(i);
  }
  EXPECT_EQ(differing, 0) << "bytes differ from FlashMLA's, first at " << first;
}

}  // namespace mlakit::test
