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
  float softmax_scale = 0.13523378f;
  double flashmla_ms = 0;   // FlashMLA's sparse decode on the H100 for this shape (issue 9), 0 if none

  std::string describe() const;  // "b=128 s_q=2 h_q=128 topk=2048 ctx=8192 kv=fp8_ds_mla"
  /// b * s_q * h_q * topk * 2 * (d_qk + d_v) (issue 9's model).
  double flops() const;
  /// Every indexed row read once, q read and out written once.
  double bytes_moved() const;
};

/// "default" (b=128, s_q=2, h_q=128, topk=2048, fp8_ds_mla) or "anchors" (issue 9's five shapes).
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
