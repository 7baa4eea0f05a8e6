// The portable CUDA backend (SM80+): dispatches each operation to its folder (decode/, cache/).
// Availability is checked per call for the device of the call's tensors (available(): the current device), from
// facts each host thread keeps per device (cuda/common/device.h); nothing is cached in globals.

#include <memory>

#include "cuda/common/device.h"
#include "cuda/ops.h"
#include "mlakit/backend.h"

namespace mlakit {
namespace {

constexpr int kMinSmMajor = 8;  // mma.sync bf16 and cp.async need Ampere

class CudaBackend final : public Backend {
 public:
  std::string name() const override { return "cuda"; }
  std::string description() const override {
    return "portable CUDA (SM80+): mma.sync tensor cores, cp.async pipelines, device-side split-KV plan";
  }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  int priority() const override { return 10; }

  std::vector<Feature> features() const override {
    std::vector<Feature> all = cuda::decode_features();
    for (Feature& f : cuda::sparse_decode_features()) all.push_back(std::move(f));
    for (Feature& f : cuda::prefill_features()) all.push_back(std::move(f));
    for (Feature& f : cuda::cache_features()) all.push_back(std::move(f));
    return all;
  }

  Status available() const override { return cuda::available_on_current_device(*this); }
  Status available_on(Device device) const override {
    const cuda::DeviceInfo* info = nullptr;
    MLAKIT_TRY(cuda::cached_device_info(device.index, &info));
    if (info->sm_major < kMinSmMajor) {
      return Status::not_supported("needs compute capability >= 8.0, device " + std::to_string(info->ordinal) +
                                   " is " + std::to_string(info->sm_major) + "." + std::to_string(info->sm_minor));
    }
    return {};
  }

 protected:
  Status do_supports_decode(const DecodeProblem& p) const override { return cuda::decode_supports(p); }
  size_t do_workspace_bytes_decode(const DecodeProblem& p) const override { return cuda::decode_workspace_bytes(p); }
  Status do_plan_decode(const DecodeProblem& p, Workspace ws, Stream s) const override {
    return cuda::decode_plan(p, ws, s);
  }
  Status do_run_decode(const DecodeProblem& p, Workspace ws, Stream s) const override {
    return cuda::decode_run(p, ws, s);
  }
  Status do_supports_sparse_decode(const SparseDecodeProblem& p) const override {
    return cuda::sparse_decode_supports(p);
  }
  size_t do_workspace_bytes_sparse_decode(const SparseDecodeProblem& p) const override {
    return cuda::sparse_decode_workspace_bytes(p);
  }
  Status do_run_sparse_decode(const SparseDecodeProblem& p, Workspace ws, Stream s) const override {
    return cuda::sparse_decode_run(p, ws, s);
  }

  Status do_supports_prefill(const PrefillProblem& p) const override { return cuda::prefill_supports(p); }
  Status do_run_prefill(const PrefillProblem& p, Stream s) const override { return cuda::prefill_run(p, s); }
  Status do_supports_append_kv(const AppendKvProblem& p) const override { return cuda::append_kv_supports(p); }
  Status do_run_append_kv(const AppendKvProblem& p, Stream s) const override { return cuda::append_kv_run(p, s); }
  Status do_supports_rope(const RopeProblem& p) const override { return cuda::rope_supports(p); }
  Status do_run_rope(const RopeProblem& p, Stream s) const override { return cuda::rope_run(p, s); }
  Status do_supports_gather_kv(const GatherKvProblem& p) const override { return cuda::gather_kv_supports(p); }
  Status do_run_gather_kv(const GatherKvProblem& p, Stream s) const override { return cuda::gather_kv_run(p, s); }
  Status do_supports_merge(const MergeProblem& p) const override { return cuda::merge_supports(p); }
  Status do_run_merge(const MergeProblem& p, Stream s) const override { return cuda::merge_run(p, s); }
  Status do_supports_merge_pair(const MergePairProblem& p) const override { return cuda::merge_pair_supports(p); }
  Status do_run_merge_pair(const MergePairProblem& p, Stream s) const override { return cuda::merge_pair_run(p, s); }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(); }

}  // namespace mlakit
