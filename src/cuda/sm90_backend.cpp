// The Hopper CUDA backend (sm_90a): dense decode on warpgroup MMA with a TMA producer, sparse decode on the
// same kernel with a gathering producer (decode/sm90/), and the ragged prefill (prefill/sm90/).
// Every other operation is left to the portable backend, which selection reports by name. Availability
// is checked per call for the device of the call's tensors (available(): the current device) and the kernel image;
// nothing is cached in globals.

#include <memory>
#include <vector>

#include "cuda/common/device.h"
#include "cuda/ops.h"
#include "mlakit/backend.h"

namespace mlakit {
namespace {

class CudaSm90Backend final : public Backend {
 public:
  std::string name() const override { return "cuda_sm90"; }
  std::string description() const override {
    return "Hopper CUDA (sm_90a): wgmma tensor cores, TMA loads by a producer warpgroup, mbarrier pipeline";
  }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  int priority() const override { return 20; }  // preferred over the portable 'cuda' where it can run
  std::vector<Feature> features() const override {
    std::vector<Feature> all = cuda::decode_sm90_features();
    for (Feature& f : cuda::sparse_decode_sm90_features()) all.push_back(std::move(f));
    for (Feature& f : cuda::prefill_sm90_features()) all.push_back(std::move(f));
    return all;
  }
  Status available() const override { return cuda::available_on_current_device(*this); }
  Status available_on(Device device) const override { return cuda::decode_sm90_available(device.index); }

 protected:
  Status do_supports_decode(const DecodeProblem& p) const override { return cuda::decode_sm90_supports(p); }
  size_t do_workspace_bytes_decode(const DecodeProblem& p) const override {
    return cuda::decode_sm90_workspace_bytes(p);
  }
  Status do_plan_decode(const DecodeProblem& p, Workspace ws, Stream s) const override {
    return cuda::decode_sm90_plan(p, ws, s);
  }
  Status do_run_decode(const DecodeProblem& p, Workspace ws, Stream s) const override {
    return cuda::decode_sm90_run(p, ws, s);
  }
  Status do_supports_sparse_decode(const SparseDecodeProblem& p) const override {
    return cuda::sparse_decode_sm90_supports(p);
  }
  size_t do_workspace_bytes_sparse_decode(const SparseDecodeProblem& p) const override {
    return cuda::sparse_decode_sm90_workspace_bytes(p);
  }
  Status do_run_sparse_decode(const SparseDecodeProblem& p, Workspace ws, Stream s) const override {
    return cuda::sparse_decode_sm90_run(p, ws, s);
  }
  Status do_supports_prefill(const PrefillProblem& p) const override { return cuda::prefill_sm90_supports(p); }
  Status do_run_prefill(const PrefillProblem& p, Stream s) const override { return cuda::prefill_sm90_run(p, s); }
};

}  // namespace

std::unique_ptr<Backend> make_cuda_sm90_backend() { return std::make_unique<CudaSm90Backend>(); }

}  // namespace mlakit
