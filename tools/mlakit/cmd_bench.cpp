// `mlakit bench`: times plan + decode (+ combine) of a preset workload, median over repetitions with the
// cache flushed before each, and checks a sample of the output against the CPU reference.

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "args.h"
#include "commands.h"
#include "decode_spec.h"
#include "cache_bench.h"
#include "cp_bench.h"
#include "decode_workload.h"
#include "prefill_bench.h"
#include "selection_error.h"
#include "sparse_bench.h"
#include "mlakit/registry.h"

namespace mlakit::cli {
namespace {

constexpr int64_t kGpuIters = 20;
constexpr int64_t kCpuIters = 3;
constexpr uint64_t kSeed = 20261122;

constexpr int64_t kCpuAppendTokens = 4096;  // CPU stand-ins for the cache modes: seconds, not minutes
constexpr int64_t kCpuGatherRows = 65536;

constexpr const char* kHelp = R"(usage: mlakit bench [options]
  --mode M           decode (default) | sparse (sparse_decode) | prefill (ragged 192/128) | append (append_kv) |
                     gather (gather_kv) | cp (context-parallel decode over this process's GPUs: issue 12's shapes
                     on 1 and N GPUs)
  --gpus N --interleave I   cp: GPUs (default: every visible one) and tokens per run of the shard rule (default 1)
  --preset NAME      decode: default (b=128, L=8192, h_q=16: a DeepSeek-V3 TP8 decode step) | anchors (the nine
                     anchor shapes of docs/performance.md; on a GPU without --backend, every CUDA decode path
                     the device runs, one row each)
                     sparse: default (b=128, s_q=2, h_q=128, topk=2048, fp8_ds_mla) | anchors (issue 9's five shapes)
                     | v4 (issue 13's five DeepSeek V4 shapes: fp8_ds_v4, extra cache)
                     prefill: default (1 request of 4096 tokens, h=128, causal) | anchors (issue 10's five shapes)
  --topk K           sparse: index columns per query token (distinct random ids from a context of --ctx rows)
  --batch N --ctx L --heads H --s-q S --page-size P     override the preset's shape (prefill: one shape of N
                     requests of L tokens each; --s-q, --page-size, --topk and --kv-format do not apply)
  --kv-format F      bf16 | fp16 | fp8_e4m3 | fp8_ds_mla | all (decode: bf16, fp8_e4m3 and fp8_ds_mla; append and
                     gather: fp16 too; sparse takes one format, its presets' own by default)
  --causal           causal masking for s_q > 1
  --backend NAME     a registered backend (default: automatic selection on the GPU, else the CPU reference)
  --inputs D         prefill: q, k and v uniform in [-1, 1) (default, as the anchors were timed) | normal (N(0, 1),
                     as torch.randn fills them: wider scores, so the online softmax's maxima move more often)
  --iters N          timed repetitions (default 20 on a GPU, 3 on the CPU); the median is reported
  --flush F          how the cache is emptied before each timed call: write (default: a buffer of twice its size
                     written; triton's do_bench, which timed the anchors, writes 256 MB: either leaves dirty lines,
                     which the call writes back as it evicts them) | read (the buffer read: the call finds clean
                     lines, as between kernels that write little). Not with --mode cp
  --json FILE        also write every result as JSON (decode and cp modes)
  --tokens T --rope  append: tokens written to random distinct slots (default 65536), with fused RoPE
  --rows N --requests B   gather: rows read (default 1,048,576) over B equal requests (default 128)
Without a GPU the preset runs on the CPU reference at b=2, L=1024 (explicit --batch/--ctx still apply);
sparse at b=2, topk=256; prefill at h=2 and 1/32 of the lengths; append and gather at 4096 tokens and 65,536 rows.
)";

struct Row {
  DecodeSpec spec;
  std::string backend;
  Status status;
  bool skipped = false;  // a path of a multi-path run that does not implement this shape
  double median_ms = 0, min_ms = 0;
  double plan_ms = 0;  // plan alone, median (it is also inside median_ms)
  double run_ms = 0;   // run alone after a plan, median: a layer's time where one plan serves every layer of a step
  double host_us = 0;  // host time per plan + run call, enqueued back to back (host_us_per_call)
  double host_plan_us = -1, host_run_us = -1;  // the same for plan alone and run alone (the JSON's split; -1: none)
  double host_prepared_us = -1;  // a one-shot call as the bindings make it: Registry::prepare + plan + run (JSON only)
  SampleCheck check;
};

/// "" for the default write flush, " by a read" for --flush read: for the header lines.
const char* flush_note(const DeviceMemory& mem) { return mem.cache_flush() == CacheFlush::kRead ? " by a read" : ""; }

/// "cuda:0 (NVIDIA H200)", or "cpu": where the bench ran, for its header lines.
std::string where(const DeviceMemory& mem) {
  const std::string model = mem.model();
  return device_name(mem.device()) + (model.empty() ? "" : " (" + model + ")");
}

/// The ceilings and anchor times are the H100's (docs/performance.md): elsewhere `what` compares across devices.
void print_anchor_note(const DeviceMemory& mem, bool on_cpu, const char* what) {
  if (on_cpu) {
    std::printf("(CPU run: %s for scale only)\n", what);
  } else if (mem.model().find("H100") == std::string::npos) {
    std::printf("(%s is not the anchors' H100: %s across GPUs)\n", mem.model().c_str(), what);
  }
}

/// Every CUDA backend the device can run, as a named preference each (`fallback` when there is none).
std::vector<Preference> cuda_paths(const Registry& registry, const Preference& fallback) {
  std::vector<Preference> paths;
  for (const Backend* b : registry.list()) {
    if (b->device_type() == DeviceType::kCUDA && b->available().ok()) paths.push_back(Preference{b->name()});
  }
  if (paths.empty()) paths = {fallback};
  return paths;
}

Row run_one(const DecodeSpec& spec, const Registry& registry, const Preference& pref, DeviceMemory* mem, int64_t iters,
            bool skip_unsupported) {
  Row row{spec, pref.backend.empty() ? "-" : pref.backend, {}, false, 0, 0, 0, 0, 0, -1, -1, -1, {}};
  std::unique_ptr<DecodeWorkload> w;
  row.status = DecodeWorkload::create(spec, mem, kSeed, &w);
  if (!row.status.ok()) return row;
  const Selection sel = registry.select(w->problem(), pref);
  if (!sel.backend) {
    row.skipped = skip_unsupported && sel.status.code() == StatusCode::kNotSupported;
    row.status = row.skipped ? sel.status : selection_error(sel);
    return row;
  }
  const Backend& be = *sel.backend;
  row.backend = be.name();
  Buffer ws(mem, be.workspace_bytes(w->problem()));
  if (!ws.ok()) {
    row.status = Status::invalid("workspace bytes=" + std::to_string(ws.bytes()) + ": allocation failed");
    return row;
  }
  const Workspace workspace{ws.get(), ws.bytes()};
  const auto step = [&]() -> Status {
    MLAKIT_TRY(be.plan(w->problem(), workspace, mem->stream()));
    return be.run(w->problem(), workspace, mem->stream());
  };
  row.status = step();  // warm-up, and the output that is checked
  if (!row.status.ok()) return row;
  if (be.name() != "reference") {
    row.status = w->check_sample(*registry.get("reference"), &row.check);
    if (!row.status.ok()) return row;
  }
  std::vector<double> times, plan_times, run_times;
  const auto plan_only = [&]() { return be.plan(w->problem(), workspace, mem->stream()); };
  const auto run_only = [&]() { return be.run(w->problem(), workspace, mem->stream()); };
  for (int64_t i = 0; i < iters; ++i) {
    double ms = 0, plan_ms = 0, run_ms = 0;
    row.status = mem->flush_cache();
    if (row.status.ok()) row.status = mem->time_ms(step, &ms);
    if (row.status.ok()) row.status = mem->time_ms(plan_only, &plan_ms);  // the plan that the run below reuses
    if (row.status.ok()) row.status = mem->flush_cache();
    if (row.status.ok()) row.status = mem->time_ms(run_only, &run_ms);
    if (!row.status.ok()) return row;
    times.push_back(ms);
    plan_times.push_back(plan_ms);
    run_times.push_back(run_ms);
  }
  row.median_ms = median(times);
  row.min_ms = *std::min_element(times.begin(), times.end());
  row.plan_ms = median(plan_times);
  row.run_ms = median(run_times);
  row.status = host_us_per_call(mem, step, int(iters), &row.host_us);
  if (!row.status.ok()) return row;
  // The split is extra information: a failure to time it leaves -1 (JSON null) and the row's own figures stand.
  if (!host_us_per_call(mem, plan_only, int(iters), &row.host_plan_us).ok()) row.host_plan_us = -1;
  if (!host_us_per_call(mem, run_only, int(iters), &row.host_run_us).ok()) row.host_run_us = -1;
  const auto one_shot = [&]() -> Status {
    Prepared<DecodeProblem> call;
    MLAKIT_TRY(registry.prepare(w->problem(), pref, &call));
    MLAKIT_TRY(call.plan(workspace, mem->stream()));
    return call.run(workspace, mem->stream());
  };
  if (!host_us_per_call(mem, one_shot, int(iters), &row.host_prepared_us).ok()) row.host_prepared_us = -1;
  return row;
}

/// A measurement that may be missing (negative) as a JSON number or null.
std::string json_number(double v) { return v < 0 ? "null" : std::to_string(v); }

void write_json(const std::string& path, const std::vector<Row>& rows, const std::string& device, double launch_us,
                CacheFlush flush) {
  std::ofstream f(path);
  f << "{\n  \"mlakit\": \"" << version() << "\", \"build\": \"" << build_info() << "\", \"device\": \"" << device
    << "\", \"flush\": \"" << cache_flush_name(flush) << "\",\n  \"ceilings\": {\"copy_GBps\": " << kCopyCeilingGBs
    << ", \"gemm_TFLOPs\": " << kGemmCeilingTFlops
    << "}, \"empty_launch_host_us\": " << json_number(launch_us) << ",\n  \"results\": [\n";
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const double s = r.median_ms * 1e-3;
    f << "    {\"b\": " << r.spec.batch << ", \"s_q\": " << r.spec.s_q << ", \"L\": " << r.spec.ctx
      << ", \"h_q\": " << r.spec.h_q << ", \"page_size\": " << r.spec.page_size << ", \"kv_format\": \""
      << kv_format_name(r.spec.format) << "\", \"causal\": " << (r.spec.causal ? "true" : "false")
      << ", \"backend\": \"" << r.backend << "\", \"ok\": " << (r.status.ok() ? "true" : "false")
      << ", \"skipped\": " << (r.skipped ? "true" : "false")
      << ", \"median_ms\": " << r.median_ms << ", \"min_ms\": " << r.min_ms << ", \"plan_ms\": " << r.plan_ms
      << ", \"run_ms\": " << r.run_ms
      << ", \"host_us_per_call\": " << r.host_us << ", \"host_us_plan\": " << json_number(r.host_plan_us)
      << ", \"host_us_run\": " << json_number(r.host_run_us)
      << ", \"host_us_prepared\": " << json_number(r.host_prepared_us)
      << ", \"gpu_md_flashmla_ms\": " << r.spec.flashmla_ms << ", \"gpu_md_triton_ms\": " << r.spec.triton_ms
      << ", \"TFLOPs\": " << (s > 0 ? r.spec.flops() / s * 1e-12 : 0)
      << ", \"GBps\": " << (s > 0 ? r.spec.bytes_moved() / s * 1e-9 : 0)
      << ", \"sample_requests\": " << r.check.requests << ", \"max_abs_err\": " << r.check.max_abs_err
      << ", \"worst_tolerance_ratio\": " << r.check.worst_ratio << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
}

/// The decode presets: time, rates, comparison with the anchors, sampled check against the reference.
int bench_decode(const Args& args, const Registry& registry, const Preference& pref, DeviceMemory* mem, bool on_cpu,
                 int64_t iters) {
  std::vector<DecodeSpec> specs;
  Status s = preset_specs(args.get("preset", "default"), &specs);
  if (s.ok() && on_cpu) {
    for (DecodeSpec& spec : specs) spec = shrink_for_cpu(spec);
  }
  if (s.ok()) s = apply_overrides(args, &specs);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  // The anchors on a GPU compare every CUDA decode path the device runs (issue 8), unless one is named.
  std::vector<Preference> paths = {pref};
  if (pref.backend.empty() && !on_cpu && args.get("preset", "default") == "anchors") paths = cuda_paths(registry, pref);
  std::vector<Row> rows;
  for (size_t i = 0; i < specs.size(); ++i) {
    for (const Preference& path : paths) {
      std::fprintf(stderr, "[%zu/%zu] %s %s ...\n", i + 1, specs.size(), specs[i].describe().c_str(),
                   path.backend.c_str());
      rows.push_back(run_one(specs[i], registry, path, mem, iters, paths.size() > 1));
      if (!rows.back().status.ok()) std::fprintf(stderr, "  %s: %s\n", rows.back().skipped ? "skipped" : "failed",
                                                 rows.back().status.to_string().c_str());
    }
  }

  std::printf("\nmlakit %s on %s, median of %lld (cache flushed%s before each), plan + decode timed together\n",
              version(), where(*mem).c_str(), static_cast<long long>(iters), flush_note(*mem));
  std::printf("%-44s %-9s %9s %8s %8s %9s %6s %8s %6s %7s %7s %10s %s\n", "shape", "backend", "ms", "host us", "run ms",
              "TFLOP/s", "%peak", "GB/s", "%copy", "xFlash", "xTriton", "max err", "check");
  int failures = 0;
  for (const Row& r : rows) {
    if (r.skipped) {
      std::printf("%-44s %-9s skipped: %s\n", r.spec.describe().c_str(), r.backend.c_str(), r.status.message().c_str());
      continue;
    }
    if (!r.status.ok()) {
      ++failures;
      std::printf("%-44s %-9s FAILED: %s\n", r.spec.describe().c_str(), r.backend.c_str(), r.status.message().c_str());
      continue;
    }
    const double sec = r.median_ms * 1e-3, tflops = r.spec.flops() / sec * 1e-12, gbs = r.spec.bytes_moved() / sec * 1e-9;
    const std::string check = r.backend == "reference" ? "is the reference"
                              : r.check.passed()        ? "ok (" + std::to_string(r.check.requests) + " requests)"
                                                        : "OUTSIDE SPEC TOLERANCE";
    if (r.backend != "reference" && !r.check.passed()) ++failures;
    const std::string err = r.backend == "reference" ? "-" : std::to_string(r.check.max_abs_err).substr(0, 9);
    // Speed-up over the anchor H100 times of the same bf16 shape ("-" where there is none).
    const auto ratio = [&](double theirs) { return theirs > 0 ? std::to_string(theirs / r.median_ms).substr(0, 4) : "-"; };
    std::printf("%-44s %-9s %9.4f %8.1f %8.4f %9.3f %5.1f%% %8.1f %5.1f%% %7s %7s %10s %s\n", r.spec.describe().c_str(),
                r.backend.c_str(), r.median_ms, r.host_us, r.run_ms, tflops, 100 * tflops / kGemmCeilingTFlops, gbs,
                100 * gbs / kCopyCeilingGBs, ratio(r.spec.flashmla_ms).c_str(), ratio(r.spec.triton_ms).c_str(),
                err.c_str(), check.c_str());
  }
  std::printf("host us: CPU time per plan + run call, %lld calls enqueued back to back (no sync between them), the\n"
              "median of 3 such batches\n"
              "run ms: run alone after a plan (cache flushed), a layer's GPU time where one plan serves a whole step\n",
              static_cast<long long>(iters));
  double launch_us = -1;  // -1: not measured (JSON null)
  if (!on_cpu) {
    const Status ls = mem->empty_launch_us(&launch_us);
    if (ls.ok()) {
      std::printf("(the JSON splits it into plan and run; one launch of an empty kernel, as the library launches: "
                  "%.1f us)\n", launch_us);
    } else {
      launch_us = -1;
      std::printf("(empty-kernel launch not timed: %s)\n", ls.message().c_str());
    }
  }
  std::printf("%%peak, %%copy: of the H100 ceilings (745 TFLOP/s, 3005 GB/s); xFlash, xTriton: the anchor H100 time\n"
              "(docs/performance.md) of the same bf16 shape for FlashMLA and SGLang Triton over ours (> 1 means faster\n"
              "than them)\n");
  print_anchor_note(*mem, on_cpu, "the ceilings and comparisons are");
  if (args.has("json")) write_json(args.get("json", ""), rows, device_name(mem->device()), launch_us,
                                     mem->cache_flush());
  return failures ? 1 : 0;
}

/// sparse: the whole call (plan + kernel + combine) timed, TFLOP/s by issue 9's model, sampled check.
int bench_sparse(const Args& args, const Registry& registry, const Preference& pref, DeviceMemory* mem, bool on_cpu,
                 int64_t iters) {
  std::vector<SparseBenchSpec> specs;
  Status s = sparse_preset_specs(args.get("preset", "default"), &specs);
  if (s.ok()) s = apply_sparse_overrides(args, on_cpu, &specs);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  std::printf("\nmlakit %s on %s, median of %lld (cache flushed%s before each), whole sparse_decode call timed\n",
              version(), where(*mem).c_str(), static_cast<long long>(iters), flush_note(*mem));
  std::printf("%-56s %-9s %9s %8s %9s %8s %7s %10s %s\n", "shape", "backend", "ms", "host us", "TFLOP/s", "GB/s",
              "xFlash", "max err", "check");
  // The anchors on a GPU compare every CUDA path that serves sparse decode, unless one is named.
  std::vector<Preference> paths = {pref};
  const std::string preset = args.get("preset", "default");
  if (pref.backend.empty() && !on_cpu && (preset == "anchors" || preset == "v4")) paths = cuda_paths(registry, pref);
  int failures = 0;
  for (const SparseBenchSpec& spec : specs) {
    for (const Preference& path : paths) {
      std::fprintf(stderr, "%s %s ...\n", spec.describe().c_str(), path.backend.c_str());
      const SparseBenchResult r = run_sparse_bench(spec, registry, path, mem, iters);
      if (paths.size() > 1 && r.status.code() == StatusCode::kNotSupported) {
        std::printf("%-56s %-9s skipped: %s\n", spec.describe().c_str(), path.backend.c_str(),
                    r.status.message().substr(0, r.status.message().find('\n')).c_str());
        continue;
      }
      if (!r.status.ok()) {
        ++failures;
        std::printf("%-56s %-9s FAILED: %s\n", spec.describe().c_str(), r.backend.c_str(), r.status.message().c_str());
        continue;
      }
      const bool is_ref = r.backend == "reference";
      if (!is_ref && !r.check.passed()) ++failures;
      const std::string check = is_ref ? "is the reference"
                                : r.check.passed() ? "ok (" + std::to_string(r.check.requests) + " requests)"
                                                   : "OUTSIDE SPEC TOLERANCE";
      const std::string err = is_ref ? "-" : std::to_string(r.check.max_abs_err).substr(0, 9);
      const std::string x = spec.flashmla_ms > 0 ? std::to_string(spec.flashmla_ms / r.median_ms).substr(0, 4) : "-";
      const double sec = r.median_ms * 1e-3;
      std::printf("%-56s %-9s %9.4f %8.1f %9.3f %8.1f %7s %10s %s\n", spec.describe().c_str(), r.backend.c_str(),
                  r.median_ms, r.host_us, spec.flops() / sec * 1e-12, spec.bytes_moved() / sec * 1e-9, x.c_str(), err.c_str(), check.c_str());
    }
  }
  std::printf("host us: CPU time per call, calls enqueued back to back (no sync between them), median of 3 batches\n");
  std::printf("TFLOP/s: b*s_q*h_q*(topk+extra)*2*(d_qk+d_v) FLOPs (576+512; V4: 512+512); GB/s: indexed rows + q + "
              "out;\nxFlash: FlashMLA's sparse decode on the H100 (issues 9 and 13) over ours (> 1 means faster than it)\n");
  print_anchor_note(*mem, on_cpu, "the comparisons are");
  return failures ? 1 : 0;
}

/// prefill: the whole call timed, TFLOP/s by issue 10's model (attended pairs only), sampled rows checked.
int bench_prefill(const Args& args, const Registry& registry, const Preference& pref, DeviceMemory* mem, bool on_cpu,
                  int64_t iters) {
  std::vector<PrefillBenchSpec> specs;
  Status s = prefill_preset_specs(args.get("preset", "default"), &specs);
  if (s.ok()) s = apply_prefill_overrides(args, on_cpu, &specs);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  std::printf("\nmlakit %s on %s, median of %lld (cache flushed%s before each), whole prefill call timed\n", version(),
              where(*mem).c_str(), static_cast<long long>(iters), flush_note(*mem));
  std::printf("%-50s %-9s %9s %8s %9s %6s %7s %10s %s\n", "shape", "backend", "ms", "host us", "TFLOP/s", "%peak",
              "xcuDNN", "max err", "check");
  // The anchors on a GPU compare every CUDA path that serves prefill, unless one is named.
  std::vector<Preference> paths = {pref};
  if (pref.backend.empty() && !on_cpu && args.get("preset", "default") == "anchors") paths = cuda_paths(registry, pref);
  int failures = 0;
  for (const PrefillBenchSpec& spec : specs) {
    for (const Preference& path : paths) {
      std::fprintf(stderr, "%s %s ...\n", spec.describe().c_str(), path.backend.c_str());
      const PrefillBenchResult r = run_prefill_bench(spec, registry, path, mem, iters);
      if (paths.size() > 1 && r.status.code() == StatusCode::kNotSupported) {
        std::printf("%-50s %-9s skipped: %s\n", spec.describe().c_str(), path.backend.c_str(),
                    r.status.message().substr(0, r.status.message().find('\n')).c_str());
        continue;
      }
      if (!r.status.ok()) {
        ++failures;
        std::printf("%-50s %-9s FAILED: %s\n", spec.describe().c_str(), r.backend.c_str(), r.status.message().c_str());
        continue;
      }
      if (!r.check.passed()) ++failures;
      const std::string check =
          r.check.passed() ? "ok (" + std::to_string(r.check.requests) + " rows)" : "OUTSIDE SPEC TOLERANCE";
      const double tflops = spec.flops() / (r.median_ms * 1e-3) * 1e-12;
      const std::string x = spec.cudnn_ms > 0 ? std::to_string(spec.cudnn_ms / r.median_ms).substr(0, 4) : "-";
      std::printf("%-50s %-9s %9.4f %8.1f %9.1f %5.1f%% %7s %10s %s\n", spec.describe().c_str(), r.backend.c_str(),
                  r.median_ms, r.host_us, tflops, 100 * tflops / kGemmCeilingTFlops, x.c_str(),
                  std::to_string(r.check.max_abs_err).substr(0, 9).c_str(), check.c_str());
    }
  }
  std::printf("TFLOP/s: 2 * h * (d_qk + d_v) * attended (query, key) pairs; %%peak: of the H100's 745 TFLOP/s;\n"
              "xcuDNN: torch SDPA (cuDNN) on the H100 (issue 10's table, padded dense batch) over ours (> 1 means\n"
              "faster than it); rows checked: first and last query of the first and last request, heads 0 and h-1\n");
  print_anchor_note(*mem, on_cpu, "%peak and xcuDNN are");
  return failures ? 1 : 0;
}

/// append / gather: GB/s against the copy ceiling, every written byte compared with the reference's.
int bench_cache(const Args& args, bool append, const Registry& registry, const Preference& pref, DeviceMemory* mem,
                bool on_cpu, int64_t iters) {
  CacheBenchSpec base;
  base.append = append;
  base.rope = args.has("rope");
  Status s = args.get_int("tokens", on_cpu ? kCpuAppendTokens : base.tokens, &base.tokens);
  if (s.ok()) s = args.get_int("rows", on_cpu ? kCpuGatherRows : base.rows, &base.rows);
  if (s.ok()) s = args.get_int("requests", base.requests, &base.requests);
  if (s.ok()) s = args.get_int("page-size", base.page_size, &base.page_size);
  if (s.ok() && (base.tokens < 1 || base.requests < 1 || base.rows < base.requests)) {
    s = Status::invalid("--tokens/--rows/--requests: need tokens >= 1 and rows >= requests >= 1");
  }
  std::vector<KvFormat> formats = {KvFormat::kBF16};
  const std::string fmt = args.get("kv-format", "bf16");
  if (s.ok() && fmt == "all") {
    formats = {KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla};
  } else if (s.ok()) {
    s = parse_kv_format(fmt, &formats[0]);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  std::printf("\nmlakit %s on %s, median of %lld (cache flushed%s before each)\n", version(),
              where(*mem).c_str(), static_cast<long long>(iters), flush_note(*mem));
  std::printf("%-44s %-9s %9s %8s %6s %s\n", "operation", "backend", "ms", "GB/s", "%copy", "check against the reference");
  int failures = 0;
  for (KvFormat f : formats) {
    CacheBenchSpec spec = base;
    spec.format = f;
    std::fprintf(stderr, "%s ...\n", spec.describe().c_str());
    const CacheBenchResult r = run_cache_bench(spec, registry, pref, mem, iters);
    if (!r.status.ok()) {
      ++failures;
      std::printf("%-44s %-9s FAILED: %s\n", spec.describe().c_str(), r.backend.c_str(), r.status.message().c_str());
      continue;
    }
    failures += r.mismatches != 0;
    const double gbs = spec.bytes_moved() / (r.median_ms * 1e-3) * 1e-9;
    const std::string check = r.mismatches == 0 ? "bit-exact (" + std::to_string(r.bytes_compared) + " bytes)"
                                                : std::to_string(r.mismatches) + " BYTES DIFFER";
    std::printf("%-44s %-9s %9.4f %8.1f %5.1f%% %s\n", spec.describe().c_str(), r.backend.c_str(), r.median_ms, gbs,
                100 * gbs / kCopyCeilingGBs, check.c_str());
  }
  std::printf("bytes: each input read once, each output written once; %%copy: of the H100's 3005 GB/s\n");
  print_anchor_note(*mem, on_cpu, "%copy is");
  return failures ? 1 : 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  std::set<std::string> options = decode_options();
  options.insert(
      {"preset", "iters", "json", "mode", "tokens", "rows", "requests", "topk", "gpus", "interleave", "inputs",
       "flush"});
  Args args;
  if (Status s = Args::parse(argc, argv, 2, options, {"help", "causal", "rope"}, &args); !s.ok() || args.has("help")) {
    if (!s.ok()) std::fprintf(stderr, "%s\n\n", s.message().c_str());
    std::fputs(kHelp, s.ok() ? stdout : stderr);
    return s.ok() ? 0 : 2;
  }
  const std::string mode = args.get("mode", "decode");
  if (mode != "decode" && mode != "sparse" && mode != "prefill" && mode != "append" && mode != "gather" && mode != "cp") {
    std::fprintf(stderr, "--mode=%s: must be one of decode, sparse, prefill, append, gather, cp\n", mode.c_str());
    return 2;
  }
  const std::string flush = args.get("flush", "write");
  if (flush != "write" && flush != "read") {
    std::fprintf(stderr, "--flush=%s: must be write or read\n", flush.c_str());
    return 2;
  }
  if (mode == "cp" && flush != "write") {
    std::fprintf(stderr, "--flush=%s: --mode cp flushes by writing only\n", flush.c_str());
    return 2;
  }
  if (mode != "prefill" && args.has("inputs")) {
    std::fprintf(stderr, "--inputs: applies to --mode prefill only (the other modes fill uniform [-1, 1) values)\n");
    return 2;
  }
  const Registry registry = make_default_registry();
  const Preference pref{args.get("backend", "")};
  if (mode == "cp") {  // GPUs only; each rank makes its own DeviceMemory on its GPU
    int64_t iters = 0;
    Status s = args.get_int("iters", kGpuIters, &iters);
    if (s.ok() && iters < 1) s = Status::invalid("--iters=" + std::to_string(iters) + ": must be >= 1");
    if (!s.ok()) {
      std::fprintf(stderr, "%s\n", s.message().c_str());
      return 2;
    }
    return bench_cp(args, registry, pref, iters);
  }

  // Where to run: the named backend's device, else the GPU when there is one, else the CPU reference.
  std::unique_ptr<DeviceMemory> mem;
  Status no_gpu;
  const Backend* named = pref.backend.empty() ? nullptr : registry.get(pref.backend);
  if (!pref.backend.empty() && named == nullptr) {
    std::string known;
    for (const Backend* b : registry.list()) known += (known.empty() ? "" : ", ") + b->name();
    std::fprintf(stderr, "--backend=%s: must be one of %s\n", pref.backend.c_str(), known.c_str());
    return 2;
  }
  if (!named || named->device_type() == DeviceType::kCUDA) no_gpu = make_cuda_memory(&mem);
  const bool on_cpu = !mem;
  if (on_cpu) {
    if (named && named->device_type() == DeviceType::kCUDA) {
      std::fprintf(stderr, "backend=%s: needs a GPU: %s\n", pref.backend.c_str(), no_gpu.message().c_str());
      return 1;
    }
    mem = make_cpu_memory();
    std::printf("note: %s%s; running the CPU reference backend at reduced size\n",
                named ? "backend=reference requested" : "no GPU: ", named ? "" : no_gpu.message().c_str());
  }
  mem->set_cache_flush(flush == "read" ? CacheFlush::kRead : CacheFlush::kWrite);
  int64_t iters = 0;
  Status s = args.get_int("iters", on_cpu ? kCpuIters : kGpuIters, &iters);
  if (s.ok() && iters < 1) s = Status::invalid("--iters=" + std::to_string(iters) + ": must be >= 1");
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  if (mode == "decode") return bench_decode(args, registry, pref, mem.get(), on_cpu, iters);
  if (mode == "sparse") return bench_sparse(args, registry, pref, mem.get(), on_cpu, iters);
  if (mode == "prefill") return bench_prefill(args, registry, pref, mem.get(), on_cpu, iters);
  return bench_cache(args, mode == "append", registry, pref, mem.get(), on_cpu, iters);
}

}  // namespace mlakit::cli
