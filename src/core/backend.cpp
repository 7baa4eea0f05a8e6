// The non-virtual half of Backend: every public entry point runs the same prelude (availability,
// validate(), device type) before the backend's own hook, so no backend can be reached with a bad call; prepare()
// runs it once for a prepared call (prepared.h, whose plan and run are in prepared.cpp).

#include "mlakit/backend.h"

#include "core/problem_types.h"
#include "core/workspace_check.h"

namespace mlakit {

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::kDecode: return "decode";
    case OpKind::kSparseDecode: return "sparse_decode";
    case OpKind::kPrefill: return "prefill";
    case OpKind::kMerge: return "merge";
    case OpKind::kAppendKv: return "append_kv";
    case OpKind::kRope: return "rope";
    case OpKind::kGatherKv: return "gather_kv";
  }
  return "unknown";
}

Status Backend::not_implemented(OpKind op) const {
  return Status::not_supported("backend '" + name() + "' does not implement " + op_name(op));
}

template <typename Problem>
Status Backend::check_device(const Problem& p) const {
  const Device dev = p.device();
  if (dev.type != device_type()) {
    return Status::not_supported("backend '" + name() + "' takes " +
                                 (device_type() == DeviceType::kCPU ? "cpu" : "cuda") + " tensors, the call's are on " +
                                 device_name(dev));
  }
  Status avail = available_on(dev);
  if (!avail.ok()) return Status::not_supported("backend '" + name() + "' is not available: " + avail.message());
  return {};
}

// Per problem type: supports_valid = device checks + the backend's hook; supports() = validate() + supports_valid.
#define MLAKIT_DEFINE_SUPPORTS(Problem, hook)                  \
  template <>                                                  \
  Status Backend::supports_valid(const Problem& p) const {     \
    MLAKIT_TRY(check_device(p));                               \
    return hook(p);                                            \
  }                                                            \
  Status Backend::supports(const Problem& p) const {           \
    MLAKIT_TRY(p.validate());                                  \
    return supports_valid(p);                                  \
  }

MLAKIT_DEFINE_SUPPORTS(DecodeProblem, do_supports_decode)
MLAKIT_DEFINE_SUPPORTS(SparseDecodeProblem, do_supports_sparse_decode)
MLAKIT_DEFINE_SUPPORTS(PrefillProblem, do_supports_prefill)
MLAKIT_DEFINE_SUPPORTS(MergeProblem, do_supports_merge)
MLAKIT_DEFINE_SUPPORTS(MergePairProblem, do_supports_merge_pair)
MLAKIT_DEFINE_SUPPORTS(AppendKvProblem, do_supports_append_kv)
MLAKIT_DEFINE_SUPPORTS(RopeProblem, do_supports_rope)
MLAKIT_DEFINE_SUPPORTS(GatherKvProblem, do_supports_gather_kv)
#undef MLAKIT_DEFINE_SUPPORTS

size_t Backend::workspace_bytes(const DecodeProblem& p) const { return do_workspace_bytes_decode(p); }
size_t Backend::workspace_bytes(const SparseDecodeProblem& p) const { return do_workspace_bytes_sparse_decode(p); }


Status Backend::plan(const DecodeProblem& p, Workspace ws, Stream stream) const {
  MLAKIT_TRY(supports(p));
  MLAKIT_TRY(check_workspace(ws, do_workspace_bytes_decode(p)));
  return do_plan_decode(p, ws, stream);
}

Status Backend::run(const DecodeProblem& p, Workspace ws, Stream stream) const {
  MLAKIT_TRY(supports(p));
  MLAKIT_TRY(check_workspace(ws, do_workspace_bytes_decode(p)));
  return do_run_decode(p, ws, stream);
}

Status Backend::run(const SparseDecodeProblem& p, Workspace ws, Stream stream) const {
  MLAKIT_TRY(supports(p));
  MLAKIT_TRY(check_workspace(ws, do_workspace_bytes_sparse_decode(p)));
  return do_run_sparse_decode(p, ws, stream);
}

#define MLAKIT_DEFINE_RUN(Problem, hook)                         \
  Status Backend::run(const Problem& p, Stream stream) const {  \
    MLAKIT_TRY(supports(p));                                     \
    return hook(p, stream);                                      \
  }

MLAKIT_DEFINE_RUN(PrefillProblem, do_run_prefill)
MLAKIT_DEFINE_RUN(MergeProblem, do_run_merge)
MLAKIT_DEFINE_RUN(MergePairProblem, do_run_merge_pair)
MLAKIT_DEFINE_RUN(AppendKvProblem, do_run_append_kv)
MLAKIT_DEFINE_RUN(RopeProblem, do_run_rope)
MLAKIT_DEFINE_RUN(GatherKvProblem, do_run_gather_kv)
#undef MLAKIT_DEFINE_RUN

// ---- prepared calls (prepared.h): the checks of supports() once, then a copy of the problem bound to this backend ----
template <typename Problem>
Status Backend::prepare_valid(const Problem& p, Prepared<Problem>* out) const {
  *out = Prepared<Problem>{};
  MLAKIT_TRY(supports_valid(p));
  out->backend_ = this;
  out->problem_ = p;
  if constexpr (kHasWorkspace<Problem>) out->workspace_bytes_ = workspace_bytes(p);
  return {};
}

template <typename Problem>
Status Backend::prepare(const Problem& p, Prepared<Problem>* out) const {
  *out = Prepared<Problem>{};
  MLAKIT_TRY(p.validate());
  return prepare_valid(p, out);
}

#define MLAKIT_INSTANTIATE_PREPARE(Problem)                                              \
  template Status Backend::prepare(const Problem&, Prepared<Problem>*) const;          \
  template Status Backend::prepare_valid(const Problem&, Prepared<Problem>*) const;
MLAKIT_PROBLEM_TYPES(MLAKIT_INSTANTIATE_PREPARE)
#undef MLAKIT_INSTANTIATE_PREPARE

}  // namespace mlakit
