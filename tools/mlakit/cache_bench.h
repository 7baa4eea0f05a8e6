#pragma once
// `mlakit bench --mode append|gather`: the cache operations of docs/spec.md sections 7 and 8 on a
// DeviceMemory, timed like decode (median, cache flushed before each repetition) and checked byte for
// byte against the CPU reference.

#include <cstdint>
#include <string>

#include "device_memory.h"
#include "mlakit/kv_format.h"
#include "mlakit/registry.h"

namespace mlakit::cli {

struct CacheBenchSpec {
  bool append = true;        // false: gather
  int64_t tokens = 65536;    // append: tokens written, to random distinct slots of a cache of 2x that many rows
  bool rope = false;         // append: fused RoPE on k_pe (positions of 16 prompts of 4096 tokens)
  int64_t rows = 1 << 20;    // gather: rows read, over `requests` requests of equal length
  int64_t requests = 128;
  int64_t page_size = 64;
  KvFormat format = KvFormat::kBF16;
  std::string describe() const;
  /// Each input read once, each output written once (the RoPE table is not counted: it stays in L2).
  double bytes_moved() const;
};

struct CacheBenchResult {
  std::string backend = "-";
  Status status;
  double median_ms = 0;
  int64_t bytes_compared = 0;  // against the reference
  int64_t mismatches = 0;
};

CacheBenchResult run_cache_bench(const CacheBenchSpec& spec, const Registry& registry, const Preference& pref,
                                 DeviceMemory* mem, int64_t iters);

}  // namespace mlakit::cli
