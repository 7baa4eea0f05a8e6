#pragma once
// FlashMLA's sparse golden vectors for DeepSeek V4 and V3.2 (MLAKIT_TESTDATA_DIR "/flashmla_sparse", its README.md
// explains the files), run through any backend: the reference on host memory (tests/cpu) and the CUDA paths on
// device memory (tests/gpu). One statement of the checks, so every backend meets the same oracle.

#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "mlakit/backend.h"

namespace mlakit::test {

struct SparseGoldenCase {
  std::string name;
  bool v4 = false;  // layout "model1" (fp8_ds_v4, V4 geometry), else "v32" (fp8_ds_mla)
  int64_t page_size = 0, extra_page_size = 0;
  float softmax_scale = 0.0f;
  bool has_kv_bf16 = false;  // the rows before quantisation are stored (for the writer's test)
};
void PrintTo(const SparseGoldenCase& c, std::ostream* os);

/// Every case of the manifest, or one named "missing" when the data is absent (the tests then skip).
std::vector<SparseGoldenCase> sparse_golden_cases();
/// The cases that store kv_bf16 (or "missing").
std::vector<SparseGoldenCase> sparse_golden_cases_with_kv_bf16();
std::string sparse_golden_dir();

/// Where a backend's operands live: copies in and out of host memory (the reference) or device memory (CUDA).
class OperandMemory {
 public:
  virtual ~OperandMemory() = default;
  /// A copy of `bytes` host bytes, owned by this object until it dies.
  virtual void* copy_in(const void* host, size_t bytes) = 0;
  virtual void copy_out(void* host, const void* mem, size_t bytes) = 0;
  /// Waits for the work queued on the default stream (no-op on the host).
  virtual void sync() = 0;
  virtual Device device() const = 0;
};
std::unique_ptr<OperandMemory> host_memory();

/// Sparse decode of case `gc` through `be`: out within docs/spec.md section 10's bf16 tolerance of FlashMLA's, lse
/// within the LSE tolerance (gtest assertions). A backend that refuses the problem skips the test with its reason
/// when `skip_refusal`, else fails.
void check_sparse_golden_decode(const SparseGoldenCase& gc, const Backend& be, OperandMemory& mem, bool skip_refusal);
/// append_kv through `be` writes FlashMLA's V4 cache bytes from kv_bf16 exactly, page padding included.
void check_sparse_golden_append(const SparseGoldenCase& gc, const Backend& be, OperandMemory& mem);

}  // namespace mlakit::test
