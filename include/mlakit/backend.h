#pragma once
/// @file backend.h
/// The backend interface (CUTLASS device-layer contract): each backend declares what it supports,
/// answers `supports(problem)` with a reason, reports its workspace size and runs the operation.
///
/// The public entry points are non-virtual: they validate the problem, check the device and the
/// backend's own `supports`, then call the protected `do_*` hook. A backend therefore never sees an
/// invalid problem, and a caller can never skip validation.

#include <cstddef>
#include <string>
#include <vector>

#include "mlakit/prepared.h"
#include "mlakit/problems.h"
#include "mlakit/status.h"
#include "mlakit/types.h"

namespace mlakit {

/// Operations of docs/spec.md sections 1-8.
enum class OpKind : uint8_t { kDecode, kSparseDecode, kPrefill, kMerge, kAppendKv, kRope, kGatherKv };
inline constexpr OpKind kAllOps[] = {OpKind::kDecode,   OpKind::kSparseDecode, OpKind::kPrefill,
                                     OpKind::kMerge,    OpKind::kAppendKv,     OpKind::kRope,
                                     OpKind::kGatherKv};
/// "decode", "sparse_decode", "prefill", "merge", "append_kv", "rope", "gather_kv".
const char* op_name(OpKind op);

/// One supported operation and the range it covers, e.g.
/// {kDecode, "kv=bf16,fp16,fp8_e4m3,fp8_ds_mla; P=1..256; h_q=any; s_q=any"}.
struct Feature {
  OpKind op;
  std::string detail;
};

class Backend {
 public:
  virtual ~Backend() = default;

  /// Unique name used by `Registry::get` and `--backend`, e.g. "reference".
  virtual std::string name() const = 0;
  /// One line for `mlakit info`.
  virtual std::string description() const = 0;
  /// The kind of device whose tensors this backend takes.
  virtual DeviceType device_type() const = 0;
  /// Automatic selection prefers higher values (the CPU reference is 0).
  virtual int priority() const = 0;
  /// What this backend implements; drives `mlakit info` and docs/backends.md.
  virtual std::vector<Feature> features() const = 0;
  /// Whether the backend can run here at all (e.g. "no CUDA device", "needs sm_90a, device is sm_80"); a CUDA backend
  /// answers for the calling thread's current device.
  virtual Status available() const { return {}; }
  /// The same for `device`, the device of a call's tensors: what every entry point asks before its checks, so that
  /// on a machine whose GPUs differ a call is judged by its own GPU, whichever is current.
  virtual Status available_on(Device device) const {
    (void)device;
    return available();
  }

  // ---- dense decode: plan on the device, then run (both CUDA-graph capturable) ----
  Status supports(const DecodeProblem& p) const;
  /// Scratch bytes for `p` (sized by p's batch; a workspace for the largest batch serves smaller ones), on p's device
  /// (the CUDA backends size it for that device's SM count whatever device is current).
  size_t workspace_bytes(const DecodeProblem& p) const;
  /// Computes the split-KV schedule from seq_lens on the device into `ws`. One plan serves every layer. (The CUDA
  /// backends plan inside the decode kernel itself for batches up to 4096 requests: their plan then launches nothing,
  /// and run reads seq_lens afresh each call; calling plan first stays the contract.)
  Status plan(const DecodeProblem& p, Workspace ws, Stream stream) const;
  /// Runs decode with the schedule that `plan` left in `ws`. On a stream that is not being captured, the CUDA
  /// backends (`cuda_sm90`, and `cuda` for dense and sparse decode) replay their two kernels (decode, combine) as one
  /// CUDA graph kept per (host thread, device, stream, kernel pair), the last 16 per thread, freed when the thread
  /// ends: a launch less of host time per call (docs/design.md, "An eager decode call replays a graph"). Under
  /// capture, or when a call needs one kernel only, they launch plainly.
  Status run(const DecodeProblem& p, Workspace ws, Stream stream) const;

  // ---- single-call operations ----
  Status supports(const SparseDecodeProblem& p) const;
  size_t workspace_bytes(const SparseDecodeProblem& p) const;
  Status run(const SparseDecodeProblem& p, Workspace ws, Stream stream) const;

  Status supports(const PrefillProblem& p) const;
  Status run(const PrefillProblem& p, Stream stream) const;

  Status supports(const MergeProblem& p) const;
  Status run(const MergeProblem& p, Stream stream) const;
  Status supports(const MergePairProblem& p) const;
  Status run(const MergePairProblem& p, Stream stream) const;

  Status supports(const AppendKvProblem& p) const;
  Status run(const AppendKvProblem& p, Stream stream) const;

  Status supports(const RopeProblem& p) const;
  Status run(const RopeProblem& p, Stream stream) const;

  Status supports(const GatherKvProblem& p) const;
  Status run(const GatherKvProblem& p, Stream stream) const;

  // ---- a call checked once (prepared.h) ----
  /// The checks of supports(p), once; on success *out is bound to this backend with its own copy of p. Defined for
  /// every problem type of problems.h.
  template <typename Problem>
  Status prepare(const Problem& p, Prepared<Problem>* out) const;

 protected:
  /// "backend 'cuda' does not implement sparse_decode": the default answer of every hook below.
  Status not_implemented(OpKind op) const;

  // Hooks. `do_supports_*` is called only with a valid problem on this backend's device type;
  // `do_run_*` only after `do_supports_*` said yes. Defaults: not implemented.
  virtual Status do_supports_decode(const DecodeProblem&) const { return not_implemented(OpKind::kDecode); }
  virtual size_t do_workspace_bytes_decode(const DecodeProblem&) const { return 0; }
  virtual Status do_plan_decode(const DecodeProblem&, Workspace, Stream) const { return not_implemented(OpKind::kDecode); }
  virtual Status do_run_decode(const DecodeProblem&, Workspace, Stream) const { return not_implemented(OpKind::kDecode); }

  virtual Status do_supports_sparse_decode(const SparseDecodeProblem&) const { return not_implemented(OpKind::kSparseDecode); }
  virtual size_t do_workspace_bytes_sparse_decode(const SparseDecodeProblem&) const { return 0; }
  virtual Status do_run_sparse_decode(const SparseDecodeProblem&, Workspace, Stream) const { return not_implemented(OpKind::kSparseDecode); }

  virtual Status do_supports_prefill(const PrefillProblem&) const { return not_implemented(OpKind::kPrefill); }
  virtual Status do_run_prefill(const PrefillProblem&, Stream) const { return not_implemented(OpKind::kPrefill); }

  virtual Status do_supports_merge(const MergeProblem&) const { return not_implemented(OpKind::kMerge); }
  virtual Status do_run_merge(const MergeProblem&, Stream) const { return not_implemented(OpKind::kMerge); }
  virtual Status do_supports_merge_pair(const MergePairProblem&) const { return not_implemented(OpKind::kMerge); }
  virtual Status do_run_merge_pair(const MergePairProblem&, Stream) const { return not_implemented(OpKind::kMerge); }

  virtual Status do_supports_append_kv(const AppendKvProblem&) const { return not_implemented(OpKind::kAppendKv); }
  virtual Status do_run_append_kv(const AppendKvProblem&, Stream) const { return not_implemented(OpKind::kAppendKv); }

  virtual Status do_supports_rope(const RopeProblem&) const { return not_implemented(OpKind::kRope); }
  virtual Status do_run_rope(const RopeProblem&, Stream) const { return not_implemented(OpKind::kRope); }

  virtual Status do_supports_gather_kv(const GatherKvProblem&) const { return not_implemented(OpKind::kGatherKv); }
  virtual Status do_run_gather_kv(const GatherKvProblem&, Stream) const { return not_implemented(OpKind::kGatherKv); }

 private:
  template <typename Problem>
  friend class Prepared;
  friend class Registry;
  /// prepare() for a problem already validated (Registry::prepare validates once for all the backends it asks).
  template <typename Problem>
  Status prepare_valid(const Problem& p, Prepared<Problem>* out) const;
  /// supports() for a problem already validated: device type, availability, then the backend's hook. Every public
  /// entry point and prepare_valid go through it, so the problem-to-hook mapping is written once (backend.cpp).
  template <typename Problem>
  Status supports_valid(const Problem& p) const;
  /// The device type and availability.
  template <typename Problem>
  Status check_device(const Problem& p) const;
};

}  // namespace mlakit
