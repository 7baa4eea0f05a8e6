// Prepared calls (include/mlakit/prepared.h): Backend::prepare (backend.cpp) runs supports()'s checks once and binds a
// copy of the problem to the backend; Prepared's plan and run, here, then call the backend's hooks directly, checking
// only the workspace (which is not part of the problem) and, on host memory, the validation again.

#include "mlakit/prepared.h"

#include <type_traits>

#include "core/problem_types.h"
#include "core/workspace_check.h"
#include "mlakit/backend.h"

namespace mlakit {
namespace {

/// Before each plan or run: the call was made, and a call on host memory is validated again. validate() reads the
/// contents of host arrays (block tables, seq_lens, indices: docs/spec.md sections 1, 2 and 9), which the caller may
/// change after prepare, and the CPU reference trusts what it checked; device arrays it never reads, so for them the
/// copy of the problem is all that was checked.
template <typename Problem>
Status check_made(const Backend* b, const Problem& p) {
  if (b == nullptr) return Status::invalid("prepared call: not made (call Registry::prepare or Backend::prepare first)");
  if (p.device().is_cpu()) return p.validate();
  return {};
}

}  // namespace

template <typename Problem>
Status Prepared<Problem>::plan(Workspace ws, Stream stream) const
  requires std::is_same_v<Problem, DecodeProblem>
{
  MLAKIT_TRY(check_made(backend_, problem_));
  MLAKIT_TRY(check_workspace(ws, workspace_bytes_));
  return backend_->do_plan_decode(problem_, ws, stream);
}

template <typename Problem>
Status Prepared<Problem>::run(Workspace ws, Stream stream) const
  requires kHasWorkspace<Problem>
{
  MLAKIT_TRY(check_made(backend_, problem_));
  MLAKIT_TRY(check_workspace(ws, workspace_bytes_));
  if constexpr (std::is_same_v<Problem, DecodeProblem>) {
    return backend_->do_run_decode(problem_, ws, stream);
  } else {
    return backend_->do_run_sparse_decode(problem_, ws, stream);
  }
}

template <typename Problem>
Status Prepared<Problem>::run(Stream stream) const
  requires(!kHasWorkspace<Problem>)
{
  MLAKIT_TRY(check_made(backend_, problem_));
  if constexpr (std::is_same_v<Problem, PrefillProblem>) {
    return backend_->do_run_prefill(problem_, stream);
  } else if constexpr (std::is_same_v<Problem, MergeProblem>) {
    return backend_->do_run_merge(problem_, stream);
  } else if constexpr (std::is_same_v<Problem, MergePairProblem>) {
    return backend_->do_run_merge_pair(problem_, stream);
  } else if constexpr (std::is_same_v<Problem, AppendKvProblem>) {
    return backend_->do_run_append_kv(problem_, stream);
  } else if constexpr (std::is_same_v<Problem, RopeProblem>) {
    return backend_->do_run_rope(problem_, stream);
  } else {
    static_assert(std::is_same_v<Problem, GatherKvProblem>, "a problem type of problems.h");
    return backend_->do_run_gather_kv(problem_, stream);
  }
}

// The explicit instantiations define the members whose constraints hold for each type.
#define MLAKIT_INSTANTIATE_PREPARED(Problem) template class Prepared<Problem>;
MLAKIT_PROBLEM_TYPES(MLAKIT_INSTANTIATE_PREPARED)
#undef MLAKIT_INSTANTIATE_PREPARED

}  // namespace mlakit
