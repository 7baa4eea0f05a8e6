#pragma once
// `mlakit bench --mode prefill`: ragged prefill (docs/spec.md section 3, issue 10) on a DeviceMemory, timed like
// decode (median, cache flushed before each repetition), sampled (query, head) rows checked against a float64
// statement of the attention computed here from the device's own inputs.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "args.h"
#include "decode_workload.h"
#include "device_memory.h"
#include "random_fill.h"
#include "mlakit/registry.h"

namespace mlakit::cli {

struct PrefillBenchSpec {
  std::vector<std::pair<int64_t, int64_t>> lens;  // (Lq, Lk) per request
  int64_t h_q = 128;
  int64_t d_qk = 192;
  int64_t d_v = 128;
  bool causal = true;
  float softmax_scale = 0.13523378f;
  double cudnn_ms = 0;  // torch SDPA (cuDNN) on the H100 for this shape (issue 10's table), 0 if none
  Inputs inputs = Inputs::kUniform;  // q, k and v: uniform in [-1, 1) or standard normal (--inputs)

  std::string describe() const;  // "4 x (4096 q, 4096 k) h=128 d=192/128 causal"
  /// 2 * h * (d_qk + d_v) * the attended (query, key) pairs (issue 10's model; causal counts only visible keys).
  double flops() const;
};

/// "default" (1 request of 4096 tokens) or "anchors" (issue 10's five shapes); h = 128, 192/128, causal.
Status prefill_preset_specs(const std::string& preset, std::vector<PrefillBenchSpec>* out);
/// Applies --batch, --ctx (one shape of --batch requests of --ctx tokens) and --heads, and refuses decode's shape
/// options by name; on the CPU shrinks to seconds (h = 2, and lengths / 32 unless --batch or --ctx name them).
Status apply_prefill_overrides(const Args& args, bool on_cpu, std::vector<PrefillBenchSpec>* specs);

struct PrefillBenchResult {
  std::string backend = "-";
  Status status;
  double median_ms = 0;
  double host_us = 0;
  SampleCheck check;
};

PrefillBenchResult run_prefill_bench(const PrefillBenchSpec& spec, const Registry& registry, const Preference& pref,
                                     DeviceMemory* mem, int64_t iters);

}  // namespace mlakit::cli
