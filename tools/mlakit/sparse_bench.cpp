#include "sparse_bench.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <random>

#include "random_fill.h"
#include "selection_error.h"

namespace mlakit::cli {
namespace {

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

/// Issue 13's DeepSeek V4 shapes: fp8_ds_v4, s_q = 2, `topk` ids over a compressed context of 4096 rows in pages of
/// 256, plus `extra` ids over a 2048-row window in pages of 64.
SparseBenchSpec make_v4(int64_t b, int64_t h_q, int64_t topk, int64_t extra, double flashmla_ms) {
  SparseBenchSpec s = make(b, 2, h_q, KvFormat::kFP8DsV4, flashmla_ms);
  s.v4 = true;
  s.topk = topk;
  s.ctx = 4096;
  s.page_size = 256;
  s.extra_topk = extra;
  s.extra_ctx = extra > 0 ? 2048 : 0;
  s.extra_page_size = 64;
  s.softmax_scale = 0.0441941738f;  // 1 / sqrt(512)
  return s;
}

/// One id set of a sparse benchmark: its cache (each request's context of `ctx` rows, page aligned when
/// `paged_ctx`), its indices, and their host copy.
struct IdSet {
  Buffer cache, indices;
  std::vector<int32_t> indices_host;
  int64_t topk = 0, ctx = 0, page_size = 0, num_pages = 0, page_bytes = 0;
};

/// First row of the context that batch entry b indexes.
int64_t ctx_base(const SparseBenchSpec& s, const IdSet& set, int64_t b) { return s.shared_ctx ? 0 : b * set.ctx; }

/// The buffers of one sparse benchmark on `mem`: the main id set, the optional extra one, q and the outputs.
struct SparseWorkload {
  Buffer q, out, lse, kv_scale;
  IdSet main, extra;
  SparseDecodeProblem problem;
};

Status create_set(const SparseBenchSpec& spec, int64_t topk, int64_t ctx, int64_t page, const char* name,
                  uint64_t seed, DeviceMemory* mem, IdSet* set) {
  const MlaDims dims = spec.dims();
  const int64_t b = spec.batch, s_q = spec.s_q;
  set->topk = topk;
  set->ctx = ctx;
  set->page_size = page;
  set->num_pages = ((spec.shared_ctx ? 1 : b) * ctx + page - 1) / page;
  set->page_bytes = bench_page_bytes(spec.format, dims.d_c, dims.d_r, page);
  MLAKIT_TRY(allocate_buffer(mem, &set->cache, size_t(set->num_pages * set->page_bytes), name));
  MLAKIT_TRY(allocate_buffer(mem, &set->indices, size_t(b * s_q * topk) * 4, "indices"));
  MLAKIT_TRY(mem->fill_random_cache(set->cache.get(), set->num_pages, page, spec.format, dims.d_c, dims.d_r, seed));
  // topk distinct random ids per query token: a partial Fisher-Yates shuffle of one permutation of the
  // context, which stays a permutation from token to token.
  std::mt19937_64 rng(seed + 1);
  std::vector<int32_t> perm(static_cast<size_t>(ctx));
  std::iota(perm.begin(), perm.end(), 0);
  set->indices_host.resize(size_t(b * s_q * topk));
  for (int64_t r = 0; r < b * s_q; ++r) {
    for (int64_t k = 0; k < topk; ++k) {
      const int64_t j = k + int64_t(rng() % uint64_t(ctx - k));
      std::swap(perm[size_t(k)], perm[size_t(j)]);
      set->indices_host[size_t(r * topk + k)] = int32_t(ctx_base(spec, *set, r / s_q) + perm[size_t(k)]);
    }
  }
  return mem->upload(set->indices.get(), set->indices_host.data(), set->indices.bytes());
}

KvCacheView set_view(const SparseBenchSpec& spec, const IdSet& set, void* data, int64_t num_pages, Device dev) {
  KvCacheView kv = KvCacheView::contiguous(data, spec.format, num_pages, set.page_size, spec.dims(), dev);
  kv.kv_scale_value = kBenchKvScale;
  return kv;
}

Status create(const SparseBenchSpec& spec, DeviceMemory* mem, SparseWorkload* w) {
  const MlaDims dims = spec.dims();
  const int64_t b = spec.batch, s_q = spec.s_q, h_q = spec.h_q;
  const int64_t q_elems = b * s_q * h_q * dims.d_qk(), out_elems = b * s_q * h_q * dims.d_v();
  MLAKIT_TRY(allocate_buffer(mem, &w->q, size_t(q_elems) * 2, "q"));
  MLAKIT_TRY(allocate_buffer(mem, &w->out, size_t(out_elems) * 2, "out"));
  MLAKIT_TRY(allocate_buffer(mem, &w->lse, size_t(b * s_q * h_q) * 4, "lse"));
  MLAKIT_TRY(allocate_buffer(mem, &w->kv_scale, sizeof(float), "kv_scale"));
  MLAKIT_TRY(create_set(spec, spec.topk, spec.ctx, spec.page_size, "kv cache", kSeed + 1, mem, &w->main));
  if (spec.extra_topk > 0) {
    MLAKIT_TRY(create_set(spec, spec.extra_topk, spec.extra_ctx, spec.extra_page_size, "extra kv cache", kSeed + 3,
                          mem, &w->extra));
  }
  MLAKIT_TRY(mem->fill_random_bf16(w->q.get(), q_elems, kSeed, Inputs::kUniform));
  MLAKIT_TRY(mem->fill_bytes(w->out.get(), kPoisonByte, w->out.bytes()));
  MLAKIT_TRY(mem->fill_bytes(w->lse.get(), kPoisonByte, w->lse.bytes()));
  const float scale = kBenchKvScale;
  MLAKIT_TRY(mem->upload(w->kv_scale.get(), &scale, sizeof scale));

  const Device dev = mem->device();
  SparseDecodeProblem& pr = w->problem;
  pr.q = TensorView::contiguous(w->q.get(), DType::kBF16, {b, s_q, h_q, dims.d_qk()}, dev);
  pr.kv = set_view(spec, w->main, w->main.cache.get(), w->main.num_pages, dev);
  // fp8_e4m3: the scale from a device pointer, as engines pass it; an extra cache shares it.
  if (spec.format == KvFormat::kFP8E4M3) pr.kv.kv_scale = static_cast<const float*>(w->kv_scale.get());
  pr.indices = TensorView::contiguous(w->main.indices.get(), DType::kInt32, {b, s_q, spec.topk}, dev);
  if (spec.extra_topk > 0) {
    pr.extra_kv = set_view(spec, w->extra, w->extra.cache.get(), w->extra.num_pages, dev);
    pr.extra_kv.kv_scale = pr.kv.kv_scale;
    pr.extra_indices = TensorView::contiguous(w->extra.indices.get(), DType::kInt32, {b, s_q, spec.extra_topk}, dev);
  }
  pr.out = TensorView::contiguous(w->out.get(), DType::kBF16, {b, s_q, h_q, dims.d_v()}, dev);
  pr.lse = TensorView::contiguous(w->lse.get(), DType::kFP32, {b, s_q, h_q}, dev);
  pr.softmax_scale = spec.softmax_scale;
  return {};
}

/// A host copy of the pages of batch entry r's context in `set` (its ids renumbered into it), and the largest |V|
/// over that context (an upper bound of the indexed rows' vmax).
struct HostContext {
  std::vector<uint8_t> pages;
  std::vector<int32_t> ids;
  KvCacheView view;
  double vmax = 0;
};

Status host_context(const SparseBenchSpec& spec, const IdSet& set, int64_t r, DeviceMemory* mem,
                    const Backend& reference, HostContext* h) {
  const int64_t base = ctx_base(spec, set, r), first_page = base / set.page_size;
  const int64_t pages = (base + set.ctx + set.page_size - 1) / set.page_size - first_page;
  h->pages.assign(size_t(pages * set.page_bytes), kPoisonByte);
  MLAKIT_TRY(mem->download(h->pages.data(), static_cast<const uint8_t*>(set.cache.get()) + first_page * set.page_bytes,
                           h->pages.size()));
  const int64_t s_q = spec.s_q, topk = set.topk;
  h->ids.assign(set.indices_host.begin() + r * s_q * topk, set.indices_host.begin() + (r + 1) * s_q * topk);
  for (int32_t& id : h->ids) id = int32_t(id - first_page * set.page_size);
  h->view = set_view(spec, set, h->pages.data(), pages, Device::cpu());
  return cache_vmax(reference, h->pages.data(), spec.format, spec.dims(), pages * set.page_size, set.page_size,
                    &h->vmax);
}

/// The first and last batch entries, recomputed by the reference over a host copy of their contexts and compared
/// with docs/spec.md section 10's bf16 rule.
Status check_sample(const SparseBenchSpec& spec, const SparseWorkload& w, DeviceMemory* mem, const Backend& reference,
                    SampleCheck* result) {
  const MlaDims dims = spec.dims();
  const int64_t b = spec.batch, s_q = spec.s_q, h_q = spec.h_q;
  const int64_t q_row = s_q * h_q * dims.d_qk(), o_row = s_q * h_q * dims.d_v();
  std::vector<int64_t> sample = {0};
  if (b > 1) sample.push_back(b - 1);
  *result = SampleCheck{};
  for (int64_t r : sample) {
    HostContext main, extra;
    MLAKIT_TRY(host_context(spec, w.main, r, mem, reference, &main));
    if (spec.extra_topk > 0) MLAKIT_TRY(host_context(spec, w.extra, r, mem, reference, &extra));
    std::vector<uint16_t> q(static_cast<size_t>(q_row)), out(static_cast<size_t>(o_row)), ref(static_cast<size_t>(o_row));
    std::vector<float> lse(size_t(s_q * h_q)), ref_lse(size_t(s_q * h_q));
    MLAKIT_TRY(mem->download(q.data(), static_cast<const uint16_t*>(w.q.get()) + r * q_row, q.size() * 2));
    MLAKIT_TRY(mem->download(out.data(), static_cast<const uint16_t*>(w.out.get()) + r * o_row, out.size() * 2));
    MLAKIT_TRY(mem->download(lse.data(), static_cast<const float*>(w.lse.get()) + r * s_q * h_q, lse.size() * 4));

    SparseDecodeProblem host;
    host.q = TensorView::contiguous(q.data(), DType::kBF16, {1, s_q, h_q, dims.d_qk()});
    host.kv = main.view;
    host.indices = TensorView::contiguous(main.ids.data(), DType::kInt32, {1, s_q, spec.topk});
    if (spec.extra_topk > 0) {
      host.extra_kv = extra.view;
      host.extra_indices = TensorView::contiguous(extra.ids.data(), DType::kInt32, {1, s_q, spec.extra_topk});
    }
    host.out = TensorView::contiguous(ref.data(), DType::kBF16, {1, s_q, h_q, dims.d_v()});
    host.lse = TensorView::contiguous(ref_lse.data(), DType::kFP32, {1, s_q, h_q});
    host.softmax_scale = spec.softmax_scale;
    MLAKIT_TRY(reference.run(host, Workspace{}, nullptr));
    compare_sample(out, ref, lse, ref_lse, std::max(main.vmax, extra.vmax), result);
  }
  return {};
}

}  // namespace

std::string SparseBenchSpec::describe() const {
  std::string d = std::string(shared_ctx ? "prefill " : "") + "b=" + std::to_string(batch) + " s_q=" + std::to_string(s_q) +
                  " h_q=" + std::to_string(h_q) + " topk=" + std::to_string(topk);
  if (extra_topk > 0) {
    d += '+';  // appended apart: GCC 12's -Wrestrict misreads "+" + std::to_string(...) here (a false positive)
    d += std::to_string(extra_topk);
  }
  d += " ctx=" + std::to_string(ctx) + " kv=" + kv_format_name(format);
  if (v4 && format != KvFormat::kFP8DsV4) d += " (V4 dims)";
  return d;
}

double SparseBenchSpec::flops() const {
  const MlaDims d = dims();
  return double(batch) * double(s_q) * double(h_q) * double(topk + extra_topk) * 2.0 * double(d.d_qk() + d.d_v());
}

double SparseBenchSpec::bytes_moved() const {
  const MlaDims d = dims();
  const double rows = double(batch) * double(s_q) * double(topk + extra_topk);
  return rows * double(kv_row_bytes(format, d.d_c, d.d_r)) + double(batch * s_q * h_q) * 2.0 * double(d.d_qk() + d.d_v());
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
  } else if (preset == "v4") {
    // Issue 13's targets: FlashMLA's sparse decode on the H100 for DeepSeek V4 (fp8_ds_v4, s_q = 2, whole call);
    // h_q = 16 is not a shape FlashMLA runs (engines pad it to 64).
    out->push_back(make_v4(128, 64, 128, 512, 0.127));
    out->push_back(make_v4(128, 128, 128, 1024, 0.235));
    out->push_back(make_v4(64, 128, 128, 1024, 0.127));
    out->push_back(make_v4(128, 64, 512, 0, 0.110));
    out->push_back(make_v4(128, 16, 128, 512, 0));
  } else {
    return Status::invalid("--preset=" + preset + ": must be one of default, anchors, v4");
  }
  return {};
}

Status apply_sparse_overrides(const Args& args, bool on_cpu, std::vector<SparseBenchSpec>* specs) {
  for (SparseBenchSpec& s : *specs) {
    if (on_cpu) {
      s.batch = std::min(s.batch, kCpuBatch);
      s.topk = std::min(s.topk, kCpuTopk);
      s.ctx = std::min(s.ctx, kCpuCtx);
      s.extra_topk = std::min(s.extra_topk, kCpuTopk);
      s.extra_ctx = std::min(s.extra_ctx, kCpuCtx);
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
    if (s.format == KvFormat::kFP8DsV4) s.v4 = true;  // the format holds V4 rows only
    if (s.extra_ctx < s.extra_topk) {
      return Status::invalid("extra_topk=" + std::to_string(s.extra_topk) + " extra_ctx=" + std::to_string(s.extra_ctx) +
                             ": need extra_topk <= extra_ctx (ids are distinct)");
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
    res.status = selection_error(sel);
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
