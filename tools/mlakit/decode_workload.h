#pragma once
// The buffers of one decode benchmark on a DeviceMemory (random q and cache, shuffled block table,
// poisoned outputs) and a sampled check of the backend's output against the CPU reference.

#include <memory>
#include <vector>

#include "decode_spec.h"
#include "device_memory.h"
#include "mlakit/backend.h"
#include "mlakit/problems.h"

namespace mlakit::cli {

/// Result of comparing sampled requests with the reference (docs/spec.md section 10, bf16 rule).
struct SampleCheck {
  int requests = 0;        // requests compared
  double max_abs_err = 0;  // max |out - ref| over every compared element
  double worst_ratio = 0;  // max |out - ref| / tolerance; <= 1 passes
  bool lse_ok = true;
  bool passed() const { return worst_ratio <= 1.0 && lse_ok; }
};

/// Adds one compared request to `result`: out and ref as bf16 bits, lse and ref_lse, and the vmax of docs/spec.md
/// section 10 (largest |V| among the rows the request attends, or an upper bound of it).
void compare_sample(const std::vector<uint16_t>& out, const std::vector<uint16_t>& ref, const std::vector<float>& lse,
                    const std::vector<float>& ref_lse, double vmax, SampleCheck* result);

/// Largest |V| (first d_v columns) over rows [0, rows) of a packed host cache of `format` and `dims` (fp8_ds_v4 pages
/// padded as KvCacheView::contiguous pads them), read back through the reference's gather_kv.
Status cache_vmax(const Backend& reference, const void* cache, KvFormat format, MlaDims dims, int64_t rows,
                  int64_t page_size, double* vmax);

class DecodeWorkload {
 public:
  /// Allocates and fills everything on `mem`; fails with the byte count when memory runs out.
  static Status create(const DecodeSpec& spec, DeviceMemory* mem, uint64_t seed, std::unique_ptr<DecodeWorkload>* out);

  const DecodeProblem& problem() const { return problem_; }
  /// Downloads the first and last request, recomputes them with `reference` and compares.
  Status check_sample(const Backend& reference, SampleCheck* result) const;

 private:
  DecodeWorkload(const DecodeSpec& spec, DeviceMemory* mem) : spec_(spec), mem_(mem) {}

  DecodeSpec spec_;
  DeviceMemory* mem_;
  int64_t pages_per_req_ = 0;
  Buffer q_, cache_, block_table_, seq_lens_, out_, lse_, kv_scale_;
  std::vector<int32_t> block_table_host_;
  DecodeProblem problem_;
};

}  // namespace mlakit::cli
