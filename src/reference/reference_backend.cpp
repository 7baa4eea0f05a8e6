// The CPU reference backend: docs/spec.md in executable form. Accepts every valid problem, any geometry,
// every page size validation admits (powers of two up to 256 in dense decode, any P >= 1 elsewhere). It is the oracle every other backend is tested against, so it favours clarity
// over speed; it is still parallel over requests x heads so that the CPU demo finishes in seconds.

#include <memory>

#include "mlakit/backend.h"
#include "reference/ops.h"

namespace mlakit {
namespace {

class ReferenceBackend final : public Backend {
 public:
  std::string name() const override { return "reference"; }
  std::string description() const override {
    return "CPU reference: docs/spec.md as plain loops, float32 accumulation, std::thread over rows";
  }
  DeviceType device_type() const override { return DeviceType::kCPU; }
  int priority() const override { return 0; }

  std::vector<Feature> features() const override {
    const std::string any_geometry = "any d_c/d_r; ";
    const std::string split = "split caches (kv_c, k_pe in two tensors) for bf16, fp16, fp8_e4m3";
    return {
        {OpKind::kDecode, any_geometry + "q=bf16,fp16; kv=bf16,fp16,fp8_e4m3,fp8_ds_mla,fp8_ds_v4; " + split +
                              "; block table 2-D or flat with indptr; P=1,2,4,..,256; h_q=1..128; s_q=1..8; causal"},
        {OpKind::kSparseDecode, any_geometry + "kv=all formats; " + split + "; V as the whole row (DeepSeek V4); "
                                               "extra cache; topk_length; attn_sink"},
        {OpKind::kPrefill, "any head dims; causal bottom-right; lse"},
        {OpKind::kMerge, "2-way and N-way; in place or out of place; fp32/bf16/fp16"},
        {OpKind::kAppendKv, "kv=bf16,fp16,fp8_e4m3,fp8_ds_mla,fp8_ds_v4; " + split + "; fused RoPE; q to fp8"},
        {OpKind::kRope, "interleaved, neox"},
        {OpKind::kGatherKv, "all formats -> bf16; " + split},
    };
  }

 protected:
  // The reference accepts every valid problem: validate() has already run.
  Status do_supports_decode(const DecodeProblem&) const override { return {}; }
  Status do_plan_decode(const DecodeProblem&, Workspace, Stream) const override { return {}; }
  Status do_run_decode(const DecodeProblem& p, Workspace, Stream) const override { return reference::decode(p); }

  Status do_supports_sparse_decode(const SparseDecodeProblem&) const override { return {}; }
  Status do_run_sparse_decode(const SparseDecodeProblem& p, Workspace, Stream) const override {
    return reference::sparse_decode(p);
  }

  Status do_supports_prefill(const PrefillProblem&) const override { return {}; }
  Status do_run_prefill(const PrefillProblem& p, Stream) const override { return reference::prefill(p); }

  Status do_supports_merge(const MergeProblem&) const override { return {}; }
  Status do_run_merge(const MergeProblem& p, Stream) const override { return reference::merge(p); }
  Status do_supports_merge_pair(const MergePairProblem&) const override { return {}; }
  Status do_run_merge_pair(const MergePairProblem& p, Stream) const override { return reference::merge_pair(p); }

  Status do_supports_append_kv(const AppendKvProblem&) const override { return {}; }
  Status do_run_append_kv(const AppendKvProblem& p, Stream) const override { return reference::append_kv(p); }

  Status do_supports_rope(const RopeProblem&) const override { return {}; }
  Status do_run_rope(const RopeProblem& p, Stream) const override { return reference::rope(p); }

  Status do_supports_gather_kv(const GatherKvProblem&) const override { return {}; }
  Status do_run_gather_kv(const GatherKvProblem& p, Stream) const override { return reference::gather_kv(p); }
};

}  // namespace

std::unique_ptr<Backend> make_reference_backend() { return std::make_unique<ReferenceBackend>(); }

}  // namespace mlakit
