#include "prefill_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mlakit/numeric.h"
#include "selection_error.h"

namespace mlakit::cli {
namespace {

constexpr uint64_t kSeed = 20261124;
constexpr uint8_t kPoisonByte = 0xff;
constexpr int64_t kCpuHeads = 2, kCpuShrink = 32;  // the CPU stand-in: well under a second
constexpr int64_t kMaxBenchTokens = 2147483647;  // --batch x --ctx: cu_seqlens are int32

PrefillBenchSpec make(std::vector<std::pair<int64_t, int64_t>> lens, double cudnn_ms) {
  PrefillBenchSpec s;
  s.lens = std::move(lens);
  s.cudnn_ms = cudnn_ms;
  return s;
}

/// Keys query i of a request sees (docs/spec.md section 3: bottom-right causal).
int64_t visible(const PrefillBenchSpec& s, int64_t lq, int64_t lk, int64_t i) {
  return s.causal ? std::clamp<int64_t>(i + lk - lq + 1, 0, lk) : lk;
}

struct PrefillWorkload {
  Buffer q, k, v, cu_q, cu_k, out, lse;
  std::vector<int32_t> cu_q_host, cu_k_host;
  PrefillProblem problem;
};

Status create(const PrefillBenchSpec& spec, DeviceMemory* mem, PrefillWorkload* w) {
  w->cu_q_host = {0};
  w->cu_k_host = {0};
  for (auto [lq, lk] : spec.lens) {
    w->cu_q_host.push_back(int32_t(w->cu_q_host.back() + lq));
    w->cu_k_host.push_back(int32_t(w->cu_k_host.back() + lk));
  }
  const int64_t t_q = w->cu_q_host.back(), t_k = w->cu_k_host.back(), h = spec.h_q, b = int64_t(spec.lens.size());
  MLAKIT_TRY(allocate_buffer(mem, &w->q, size_t(t_q * h * spec.d_qk) * 2, "q"));
  MLAKIT_TRY(allocate_buffer(mem, &w->k, size_t(t_k * h * spec.d_qk) * 2, "k"));
  MLAKIT_TRY(allocate_buffer(mem, &w->v, size_t(t_k * h * spec.d_v) * 2, "v"));
  MLAKIT_TRY(allocate_buffer(mem, &w->cu_q, size_t(b + 1) * 4, "cu_seqlens_q"));
  MLAKIT_TRY(allocate_buffer(mem, &w->cu_k, size_t(b + 1) * 4, "cu_seqlens_k"));
  MLAKIT_TRY(allocate_buffer(mem, &w->out, size_t(t_q * h * spec.d_v) * 2, "out"));
  MLAKIT_TRY(allocate_buffer(mem, &w->lse, size_t(t_q * h) * 4, "lse"));
  MLAKIT_TRY(mem->fill_random_bf16(w->q.get(), t_q * h * spec.d_qk, kSeed, spec.inputs));
  MLAKIT_TRY(mem->fill_random_bf16(w->k.get(), t_k * h * spec.d_qk, kSeed + 1, spec.inputs));
  MLAKIT_TRY(mem->fill_random_bf16(w->v.get(), t_k * h * spec.d_v, kSeed + 2, spec.inputs));
  MLAKIT_TRY(mem->upload(w->cu_q.get(), w->cu_q_host.data(), w->cu_q.bytes()));
  MLAKIT_TRY(mem->upload(w->cu_k.get(), w->cu_k_host.data(), w->cu_k.bytes()));
  MLAKIT_TRY(mem->fill_bytes(w->out.get(), kPoisonByte, w->out.bytes()));
  MLAKIT_TRY(mem->fill_bytes(w->lse.get(), kPoisonByte, w->lse.bytes()));
  const Device dev = mem->device();
  PrefillProblem& p = w->problem;
  p.q = TensorView::contiguous(w->q.get(), DType::kBF16, {t_q, h, spec.d_qk}, dev);
  p.k = TensorView::contiguous(w->k.get(), DType::kBF16, {t_k, h, spec.d_qk}, dev);
  p.v = TensorView::contiguous(w->v.get(), DType::kBF16, {t_k, h, spec.d_v}, dev);
  p.cu_seqlens_q = TensorView::contiguous(w->cu_q.get(), DType::kInt32, {b + 1}, dev);
  p.cu_seqlens_k = TensorView::contiguous(w->cu_k.get(), DType::kInt32, {b + 1}, dev);
  p.out = TensorView::contiguous(w->out.get(), DType::kBF16, {t_q, h, spec.d_v}, dev);
  p.lse = TensorView::contiguous(w->lse.get(), DType::kFP32, {t_q, h}, dev);
  p.softmax_scale = spec.softmax_scale;
  p.causal = spec.causal;
  return {};
}

/// Head `h` of tokens [begin, begin + count) of a [T, h_q, d] bf16 tensor on `mem`, as float [count, d].
Status download_head(DeviceMemory* mem, const void* t, int64_t h_q, int64_t d, int64_t h, int64_t begin, int64_t count,
                     std::vector<float>* out) {
  std::vector<uint16_t> row(static_cast<size_t>(d));
  out->resize(size_t(count * d));
  for (int64_t j = 0; j < count; ++j) {
    MLAKIT_TRY(mem->download(row.data(), static_cast<const uint16_t*>(t) + ((begin + j) * h_q + h) * d, size_t(d) * 2));
    for (int64_t c = 0; c < d; ++c) (*out)[size_t(j * d + c)] = bf16_to_float(row[size_t(c)]);
  }
  return {};
}

/// The first and last query rows of the first and last requests, heads 0 and h_q - 1, against float64
/// attention over the same bf16 inputs (docs/spec.md section 10's bf16 rule).
Status check_sample(const PrefillBenchSpec& spec, const PrefillWorkload& w, DeviceMemory* mem, SampleCheck* result) {
  *result = SampleCheck{};
  std::vector<int64_t> requests = {0};
  if (spec.lens.size() > 1) requests.push_back(int64_t(spec.lens.size()) - 1);
  for (int64_t r : requests) {
    const auto [lq, lk] = spec.lens[size_t(r)];
    if (lq == 0) continue;
    for (int64_t h : {int64_t(0), spec.h_q - 1}) {
      std::vector<float> k, v, q;
      MLAKIT_TRY(download_head(mem, w.k.get(), spec.h_q, spec.d_qk, h, w.cu_k_host[size_t(r)], lk, &k));
      MLAKIT_TRY(download_head(mem, w.v.get(), spec.h_q, spec.d_v, h, w.cu_k_host[size_t(r)], lk, &v));
      MLAKIT_TRY(download_head(mem, w.q.get(), spec.h_q, spec.d_qk, h, w.cu_q_host[size_t(r)], lq, &q));
      for (int64_t i : {int64_t(0), lq - 1}) {
        const int64_t n = visible(spec, lq, lk, i), token = w.cu_q_host[size_t(r)] + i;
        std::vector<double> s(static_cast<size_t>(n)), acc(static_cast<size_t>(spec.d_v), 0.0);
        double m = -INFINITY, denom = 0, vmax = 0;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < spec.d_qk; ++c) dot += double(q[size_t(i * spec.d_qk + c)]) * k[size_t(j * spec.d_qk + c)];
          s[size_t(j)] = double(spec.softmax_scale) * dot;
          m = std::max(m, s[size_t(j)]);
        }
        for (int64_t j = 0; j < n; ++j) {
          const double p = std::exp(s[size_t(j)] - m);
          denom += p;
          for (int64_t c = 0; c < spec.d_v; ++c) {
            acc[size_t(c)] += p * v[size_t(j * spec.d_v + c)];
            vmax = std::max(vmax, std::fabs(double(v[size_t(j * spec.d_v + c)])));
          }
        }
        std::vector<uint16_t> out(static_cast<size_t>(spec.d_v)), ref(static_cast<size_t>(spec.d_v));
        std::vector<float> lse(1), ref_lse{n > 0 ? float(m + std::log(denom)) : -INFINITY};
        for (int64_t c = 0; c < spec.d_v; ++c) ref[size_t(c)] = float_to_bf16(n > 0 ? float(acc[size_t(c)] / denom) : 0.0f);
        MLAKIT_TRY(mem->download(out.data(), static_cast<const uint16_t*>(w.out.get()) + (token * spec.h_q + h) * spec.d_v,
                                 out.size() * 2));
        MLAKIT_TRY(mem->download(lse.data(), static_cast<const float*>(w.lse.get()) + token * spec.h_q + h, 4));
        compare_sample(out, ref, lse, ref_lse, vmax, result);
      }
    }
  }
  return {};
}

}  // namespace

std::string PrefillBenchSpec::describe() const {
  // Runs of equal requests: "4 x (4096 q, 4096 k)".
  std::string s;
  for (size_t i = 0; i < lens.size();) {
    size_t j = i;
    while (j < lens.size() && lens[j] == lens[i]) ++j;
    s += (s.empty() ? "" : " + ") + std::to_string(j - i) + " x (" + std::to_string(lens[i].first) + " q, " +
         std::to_string(lens[i].second) + " k)";
    i = j;
  }
  return s + " h=" + std::to_string(h_q) + " d=" + std::to_string(d_qk) + "/" + std::to_string(d_v) +
         (causal ? " causal" : "") + (inputs == Inputs::kNormal ? " N(0,1)" : "");
}

double PrefillBenchSpec::flops() const {
  double pairs = 0;
  for (auto [lq, lk] : lens) {
    for (int64_t i = 0; i < lq; ++i) pairs += double(visible(*this, lq, lk, i));
  }
  return 2.0 * double(h_q) * double(d_qk + d_v) * pairs;
}

Status prefill_preset_specs(const std::string& preset, std::vector<PrefillBenchSpec>* out) {
  out->clear();
  const auto same = [](int n, int64_t lq, int64_t lk) { return std::vector<std::pair<int64_t, int64_t>>(size_t(n), {lq, lk}); };
  if (preset == "default") {
    out->push_back(make(same(1, 4096, 4096), 1.28));
  } else if (preset == "anchors") {  // issue 10's table: torch SDPA (cuDNN) on the H100, padded dense batch
    *out = {make(same(1, 16384, 16384), 18.3), make(same(4, 4096, 4096), 4.92), make(same(1, 4096, 4096), 1.28),
            make(same(64, 512, 512), 2.21), make(same(4, 1024, 9216), 0)};
  } else {
    return Status::invalid("--preset=" + preset + ": must be one of default, anchors");
  }
  return {};
}

Status apply_prefill_overrides(const Args& args, bool on_cpu, std::vector<PrefillBenchSpec>* specs) {
  // Decode's shape options have no meaning here: refused by name rather than ignored.
  for (const char* name : {"s-q", "page-size", "topk", "kv-format"}) {
    if (args.has(name)) {
      return Status::invalid(std::string("--") + name +
                             ": does not apply to --mode prefill (its shape: --batch requests of --ctx tokens, --heads)");
    }
  }
  // --batch and --ctx replace the preset's shapes with one: --batch requests of --ctx query tokens over as many keys
  // (each defaults to the preset's first shape), the preset's causality kept.
  const bool explicit_shape = args.has("batch") || args.has("ctx");
  if (explicit_shape) {
    PrefillBenchSpec s = specs->front();
    int64_t n = int64_t(s.lens.size()), l = s.lens.front().first;
    MLAKIT_TRY(args.get_int("batch", n, &n));
    MLAKIT_TRY(args.get_int("ctx", l, &l));
    if (n < 1 || n > kMaxBenchTokens) {
      return Status::invalid("--batch=" + std::to_string(n) + ": must be in [1, " + std::to_string(kMaxBenchTokens) + "]");
    }
    if (l < 0 || l > kMaxBenchTokens / n) {
      return Status::invalid("--ctx=" + std::to_string(l) + ": must be in [0, " + std::to_string(kMaxBenchTokens / n) +
                             "] (--batch x --ctx tokens at most " + std::to_string(kMaxBenchTokens) + ")");
    }
    s.lens.assign(size_t(n), {l, l});
    s.cudnn_ms = 0;  // not an anchor's shape
    *specs = {s};
  }
  const std::string inputs = args.get("inputs", "uniform");
  if (inputs != "uniform" && inputs != "normal") {
    return Status::invalid("--inputs=" + inputs + ": must be uniform or normal");
  }
  for (PrefillBenchSpec& s : *specs) {
    s.inputs = inputs == "normal" ? Inputs::kNormal : Inputs::kUniform;
    if (on_cpu) {
      s.h_q = std::min(s.h_q, kCpuHeads);
      if (!explicit_shape) {  // the preset's lengths shrunk; lengths asked for are kept
        for (auto& [lq, lk] : s.lens) {
          lq = std::max<int64_t>(1, lq / kCpuShrink);
          lk = std::max<int64_t>(lq, lk / kCpuShrink);
        }
        s.cudnn_ms = 0;
      }
    }
    MLAKIT_TRY(args.get_int("heads", s.h_q, &s.h_q));
    if (args.has("heads")) s.cudnn_ms = 0;  // no longer the anchor's shape
    if (s.h_q < 1) return Status::invalid("--heads=" + std::to_string(s.h_q) + ": must be >= 1");
  }
  return {};
}

PrefillBenchResult run_prefill_bench(const PrefillBenchSpec& spec, const Registry& registry, const Preference& pref,
                                     DeviceMemory* mem, int64_t iters) {
  PrefillBenchResult res;
  PrefillWorkload w;
  res.status = create(spec, mem, &w);
  if (!res.status.ok()) return res;
  const Selection sel = registry.select(w.problem, pref);
  if (!sel.backend) {
    res.status = selection_error(sel);
    return res;
  }
  const Backend& be = *sel.backend;
  res.backend = be.name();
  const auto call = [&]() -> Status { return be.run(w.problem, mem->stream()); };
  res.status = call();  // warm-up, and the output that is checked
  if (!res.status.ok()) return res;
  res.status = check_sample(spec, w, mem, &res.check);
  if (!res.status.ok()) return res;
  res.status = time_call(mem, call, iters, &res.median_ms, &res.host_us);
  return res;
}

}  // namespace mlakit::cli
