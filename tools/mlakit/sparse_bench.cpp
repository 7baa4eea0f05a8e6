#include "sparse_bench.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>

#include "random_fill.h"

namespace mlakit::cli {
namespace {

constexpr MlaDims kDims{};
constexpr uint64_t kSeed = 20261123;
constexpr uint8_t kPoisonByte = 0xff;
constexpr int64_t kCpuBatch = 2, kCpuTopk = 256, kCpuCtx = 1024;  // the CPU stand-in: well under a second

SparseBenchSpec make(int64_t b, int64_t s_q, int64_t h_q, KvFormat f, double flashmla_ms) {
  SparseBenchSpec s;
  s.batch = b;
  s.s_q = s_q;
  s.h_q = h_q;
  s.format = f;
  s.flashmla_ms = flashmla_ms;
  return s;
}

/// The buffers of one sparse benchmark on `mem`, and the host copy of the indices (for the sampled check).
struct SparseWorkload {
  Buffer q, cache, indices, out, lse, kv_scale;
  std::vector<int32_t> indices_host;
  SparseDecodeProblem problem;
};

/// First row of the context that query token (b, i) indexes.
int64_t ctx_base(const SparseBenchSpec& s, int64_t b) { return s.shared_ctx ? 0 : b * s.ctx; }

Status create(const SparseBenchSpec& spec, DeviceMemory* mem, SparseWorkload* w) {
  const int64_t b = spec.batch, s_q = spec.s_q, h_q = spec.h_q, p = spec.page_size;
  const int64_t rows = (spec.shared_ctx ? 1 : b) * spec.ctx;
  const int64_t num_pages = (rows + p - 1) / p;
  const int64_t row_bytes = kv_row_bytes(spec.format, kDims.d_c, kDims.d_r);
  const int64_t q_elems = b * s_q * h_q * kDims.d_qk(), out_elems = b * s_q * h_q * kDims.d_v();
  MLAKIT_TRY(allocate_buffer(mem, &w->q, size_t(q_elems) * 2, "q"));
  MLAKIT_TRY(allocate_buffer(mem, &w->cache, size_t(num_pages * p * row_bytes), "kv cache"));
  MLAKIT_TRY(allocate_buffer(mem, &w->indices, size_t(b * s_q * spec.topk) * 4, "indices"));
  MLAKIT_TRY(allocate_buffer(mem, &w->out, size_t(out_elems) * 2, "out"));
  MLAKIT_TRY(allocate_buffer(mem, &w->lse, size_t(b * s_q * h_q) * 4, "lse"));
  MLAKIT_TRY(allocate_buffer(mem, &w->kv_scale, sizeof(float), "kv_scale"));
  MLAKIT_TRY(mem->fill_random_bf16(w->q.get(), q_elems, kSeed));
  MLAKIT_TRY(mem->fill_random_cache(w->cache.get(), num_pages * p, spec.format, kDims.d_c, kDims.d_r, kSeed + 1));
  MLAKIT_TRY(mem->fill_bytes(w->out.get(), kPoisonByte, w->out.bytes()));
  MLAKIT_TRY(mem->fill_bytes(w->lse.get(), kPoisonByte, w->lse.bytes()));
  const float scale = kBenchKvScale;
  MLAKIT_TRY(mem->upload(w->kv_scale.get(), &scale, sizeof scale));

  // topk distinct random ids per query token: a partial Fisher-Yates shuffle of one permutation of the
  // context, which stays a permutation from token to token.
  std::mt19937_64 rng(kSeed + 2);
  std::vector<int32_t> perm(static_cast<size_t>(spec.ctx));
  std::iota(perm.begin(), perm.end(), 0);
  w->indices_host.resize(size_t(b * s_q * spec.topk));
  for (int64_t r = 0; r < b * s_q; ++r) {
    for (int64_t k = 0; k < spec.topk; ++k) {
      const int64_t j = k + int64_t(rng() % uint64_t(spec.ctx - k));
      std::swap(perm[size_t(k)], perm[size_t(j)]);
      w->indices_host[size_t(r * spec.topk + k)] = int32_t(ctx_base(spec, r / s_q) + perm[size_t(k)]);
    }
  }
  MLAKIT_TRY(mem->upload(w->indices.get(), w->indices_host.data(), w->indices.bytes()));

  const Device dev = mem->device();
  SparseDecodeProblem& pr = w->problem;
  pr.q = TensorView::contiguous(w->q.get(), DType::kBF16, {b, s_q, h_q, kDims.d_qk()}, dev);
  pr.kv = KvCacheView::contiguous(w->cache.get(), spec.format, num_pages, p, kDims, dev);
  if (spec.format == KvFormat::kFP8E4M3) pr.kv.kv_scale = static_cast<const float*>(w->kv_scale.get());
  pr.indices = TensorView::contiguous(w->indices.get(), DType::kInt32, {b, s_q, spec.topk}, dev);
  pr.out = TensorView::contiguous(w->out.get(), DType::kBF16, {b, s_q, h_q, kDims.d_v()}, dev);
  pr.lse = TensorView::contiguous(w->lse.get(), DType::kFP32, {b, s_q, h_q}, dev);
  pr.softmax_scale = spec.softmax_scale;
  return {};
}

/// The first and last batch entries, recomputed by the reference over a host copy of their context (ids
/// renumbered into it) and compared with docs/spec.md section 10's bf16 rule.
Status check_sample(const SparseBenchSpec& spec, const SparseWorkload& w, DeviceMemory* mem, const Backend& reference,
                    SampleCheck* result) {
  const int64_t b = spec.batch, s_q = spec.s_q, h_q = spec.h_q, p = spec.page_size, topk = spec.topk;
  const int64_t row_bytes = kv_row_bytes(spec.format, kDims.d_c, kDims.d_r);
  const int64_t q_row = s_q * h_q * kDims.d_qk(), o_row = s_q * h_q * kDims.d_v();
  std::vector<int64_t> sample = {0};
  if (b > 1) sample.push_back(b - 1);
  *result = SampleCheck{};
  for (int64_t r : sample) {
    const int64_t base = ctx_base(spec, r), pages = (spec.ctx + p - 1) / p;
    std::vector<uint8_t> ctx(size_t(pages * p * row_bytes), kPoisonByte);
    MLAKIT_TRY(mem->download(ctx.data(), static_cast<const uint8_t*>(w.cache.get()) + base * row_bytes,
                             size_t(spec.ctx * row_bytes)));
    std::vector<uint16_t> q(static_cast<size_t>(q_row)), out(static_cast<size_t>(o_row)), ref(static_cast<size_t>(o_row));
    std::vector<float> lse(size_t(s_q * h_q)), ref_lse(size_t(s_q * h_q));
    MLAKIT_TRY(mem->download(q.data(), static_cast<const uint16_t*>(w.q.get()) + r * q_row, q.size() * 2));
    MLAKIT_TRY(mem->download(out.data(), static_cast<const uint16_t*>(w.out.get()) + r * o_row, out.size() * 2));
    MLAKIT_TRY(mem->download(lse.data(), static_cast<const float*>(w.lse.get()) + r * s_q * h_q, lse.size() * 4));
    std::vector<int32_t> ids(w.indices_host.begin() + r * s_q * topk, w.indices_host.begin() + (r + 1) * s_q * topk);
    for (int32_t& id : ids) id = int32_t(id - base);

    SparseDecodeProblem host;
    host.q = TensorView::contiguous(q.data(), DType::kBF16, {1, s_q, h_q, kDims.d_qk()});
    host.kv = KvCacheView::contiguous(ctx.data(), spec.format, pages, p, kDims);
    host.kv.kv_scale_value = kBenchKvScale;
    host.indices = TensorView::contiguous(ids.data(), DType::kInt32, {1, s_q, topk});
    host.out = TensorView::contiguous(ref.data(), DType::kBF16, {1, s_q, h_q, kDims.d_v()});
    host.lse = TensorView::contiguous(ref_lse.data(), DType::kFP32, {1, s_q, h_q});
    host.softmax_scale = spec.softmax_scale;
    MLAKIT_TRY(reference.run(host, Workspace{}, nullptr));
    double vmax = 0;  // over the whole context: an upper bound of the indexed rows' vmax
    MLAKIT_TRY(cache_vmax(reference, ctx.data(), spec.format, spec.ctx, p, &vmax));
    compare_sample(out, ref, lse, ref_lse, vmax, result);
  }
  return {};
}

}  // namespace

std::string SparseBenchSpec::describe() const {
  return std::string(shared_ctx ? "prefill " : "") + "b=" + std::to_string(batch) + " s_q=" + std::to_string(s_q) +
         " h_q=" + std::to_string(h_q) + " topk=" + std::to_string(topk) + " ctx=" + std::to_string(ctx) +
         " kv=" + kv_format_name(format);
}

double SparseBenchSpec::flops() const {
  return double(batch) * double(s_q) * double(h_q) * double(topk) * 2.0 * double(kDims.d_qk() + kDims.d_v());
}

double SparseBenchSpec::bytes_moved() const {
  const double rows = double(batch) * double(s_q) * double(topk);
  return rows * double(kv_row_bytes(format, kDims.d_c, kDims.d_r)) +
         double(batch * s_q * h_q) * 2.0 * double(kDims.d_qk() + kDims.d_v());
}

Status sparse_preset_specs(const std::string& preset, std::vector<SparseBenchSpec>* out) {
  out->clear();
  // Issue 9's anchors: FlashMLA's sparse fp8 decode on the H100 (top-k 2048, fp8_ds_mla); h_q = 16 is not a
  // shape FlashMLA runs (engines pad it to 64), so it has no anchor time.
  const SparseBenchSpec first = make(128, 2, 128, KvFormat::kFP8DsMla, 0.371);
  if (preset == "default") {
    out->push_back(first);
  } else if (preset == "anchors") {
    out->push_back(first);
    out->push_back(make(128, 1, 128, KvFormat::kFP8DsMla, 0.208));
    out->push_back(make(128, 2, 64, KvFormat::kFP8DsMla, 0.270));
    out->push_back(make(128, 2, 16, KvFormat::kFP8DsMla, 0));
    SparseBenchSpec prefill = make(4096, 1, 128, KvFormat::kBF16, 0);  // 4096 prompt tokens of one sequence
    prefill.shared_ctx = true;
    out->push_back(prefill);
  } else {
    return Status::invalid("--preset=" + preset + ": must be one of default, anchors");
  }
  return {};
}

Status apply_sparse_overrides(const Args& args, bool on_cpu, std::vector<SparseBenchSpec>* specs) {
  for (SparseBenchSpec& s : *specs) {
    if (on_cpu) {
      s.batch = std::min(s.batch, kCpuBatch);
      s.topk = std::min(s.topk, kCpuTopk);
      s.ctx = std::min(s.ctx, kCpuCtx);
      s.flashmla_ms = 0;
    }
    MLAKIT_TRY(args.get_int("batch", s.batch, &s.batch));
    MLAKIT_TRY(args.get_int("heads", s.h_q, &s.h_q));
    MLAKIT_TRY(args.get_int("s-q", s.s_q, &s.s_q));
    MLAKIT_TRY(args.get_int("page-size", s.page_size, &s.page_size));
    MLAKIT_TRY(args.get_int("topk", s.topk, &s.topk));
    MLAKIT_TRY(args.get_int("ctx", s.ctx, &s.ctx));
    if (args.has("kv-format")) MLAKIT_TRY(parse_kv_format(args.get("kv-format", ""), &s.format));
    for (const char* o : {"batch", "heads", "s-q", "page-size", "topk", "ctx", "kv-format"}) {
      if (args.has(o)) s.flashmla_ms = 0;  // no longer the anchor's shape
    }
    if (s.ctx < s.topk || s.topk < 1 || s.batch < 1 || s.page_size < 1) {
      return Status::invalid("--topk=" + std::to_string(s.topk) + " --ctx=" + std::to_string(s.ctx) +
                             ": need 1 <= topk <= ctx (ids are distinct), batch >= 1 and page_size >= 1");
    }
  }
  return {};
}

SparseBenchResult run_sparse_bench(const SparseBenchSpec& spec, const Registry& registry, const Preference& pref,
                                   DeviceMemory* mem, int64_t iters) {
  SparseBenchResult res;
  SparseWorkload w;
  res.status = create(spec, mem, &w);
  if (!res.status.ok()) return res;
  const Selection sel = registry.select(w.problem, pref);
  if (!sel.backend) {
    res.status = Status(sel.status.code(), sel.status.message() + "\n" + sel.explain());
    return res;
  }
  const Backend& be = *sel.backend;
  res.backend = be.name();
  Buffer ws(mem, be.workspace_bytes(w.problem));
  if (!ws.ok()) {
    res.status = Status::invalid("workspace bytes=" + std::to_string(ws.bytes()) + ": allocation failed");
    return res;
  }
  const Workspace workspace{ws.get(), ws.bytes()};
  const auto call = [&]() -> Status { return be.run(w.problem, workspace, mem->stream()); };
  res.status = call();  // warm-up, and the output that is checked
  if (!res.status.ok()) return res;
  if (be.name() != "reference") {
    res.status = check_sample(spec, w, mem, *registry.get("reference"), &res.check);
    if (!res.status.ok()) return res;
  }
  res.status = time_call(mem, call, iters, &res.median_ms, &res.host_us);
  return res;
}

}  // namespace mlakit::cli
