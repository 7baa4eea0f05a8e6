#pragma once
// `mlakit bench --mode sparse`: sparse (top-k) decode of docs/spec.md section 2 on a DeviceMemory, whole call timed
// like decode (median, cache flushed before each repetition), a sample of query tokens checked against the
// CPU reference. Decode shapes give every request its own context with random distinct ids in it; the
// prefill shape runs b = tokens of one sequence, each token with its own ids, as engines call it.

#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "decode_workload.h"
#include "device_memory.h"
#include "mlakit/kv_format.h"
#include "mlakit/registry.h"

namespace mlakit::cli {

struct SparseBenchSpec {
  int64_t batch = 128;
  int64_t s_q = 2;
  int64_t h_q = 128;
  int64_t topk = 2048;
  int64_t ctx = 8192;       // rows each request's ids are drawn from (its context)
  bool shared_ctx = false;  // prefill: every query token indexes the same ctx rows (one sequence)
  int64_t page_size = 64;
  KvFormat format = KvFormat::kFP8DsMla;
  bool v4 = false;          // DeepSeek V4's geometry (d_c 448, whole-row V); fp8_ds_v4 needs it
  // DeepSeek V4's extra cache: extra_topk ids per query token into its own cache (0: none), each request's drawn
  // from its own extra_ctx rows, pages of extra_page_size.
  int64_t extra_topk = 0;
  int64_t extra_ctx = 0;
  int64_t extra_page_size = 64;
  float softmax_scale = 0.13523378f;
  double flashmla_ms = 0;   // FlashMLA's sparse decode on the H100 for this shape (issues 9, 13), 0 if none

  MlaDims dims() const { return v4 ? MlaDims::deepseek_v4() : MlaDims{}; }
  std::string describe() const;  // "b=128 s_q=2 h_q=128 topk=2048 ctx=8192 kv=fp8_ds_mla"
  /// b * s_q * h_q * (topk + extra_topk) * 2 * (d_qk + d_v) (the model of issues 9 and 13).
  double flops() const;
  /// Every indexed row read once, q read and out written once.
  double bytes_moved() const;
};

/// "default" (b=128, s_q=2, h_q=128, topk=2048, fp8_ds_mla), "anchors" (issue 9's five shapes) or "v4" (issue 13's
/// five DeepSeek V4 shapes: fp8_ds_v4, s_q=2, main pages of 256 and an extra cache with pages of 64).
Status sparse_preset_specs(const std::string& preset, std::vector<SparseBenchSpec>* out);
/// Applies --batch --heads --s-q --page-size --kv-format --topk --ctx; on the CPU shrinks to seconds.
Status apply_sparse_overrides(const Args& args, bool on_cpu, std::vector<SparseBenchSpec>* specs);

struct SparseBenchResult {
  std::string backend = "-";
  Status status;
  double median_ms = 0;
  double host_us = 0;  // host time per call, enqueued back to back (host_us_per_call)
  SampleCheck check;
};

SparseBenchResult run_sparse_bench(const SparseBenchSpec& spec, const Registry& registry, const Preference& pref,
                                   DeviceMemory* mem, int64_t iters);

}  // namespace mlakit::cli
