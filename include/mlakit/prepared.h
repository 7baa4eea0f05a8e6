#pragma once
/// @file prepared.h
/// A call checked once and bound to its backend, for callers that issue it at once: an eager framework operator, a
/// one-shot Python call. Backend's entry points each check their call in full (validation, device type,
/// availability, the backend's support, the workspace size), and a one-shot decode passes four of them (select,
/// workspace_bytes, plan, run), so it was validated four times. `Registry::prepare` (or `Backend::prepare`) does
/// the checks once and returns a `Prepared` call that holds its own copy of the problem (the views, not the data:
/// what was checked is what runs) and its workspace size; its plan and run go straight to the backend's kernels.
///
///   Prepared<DecodeProblem> call;
///   MLAKIT_TRY(registry.prepare(problem, {}, &call));
///   Workspace ws{alloc(call.workspace_bytes()), call.workspace_bytes()};
///   MLAKIT_TRY(call.plan(ws, stream));
///   MLAKIT_TRY(call.run(ws, stream));
///
/// A call for new pointers (the next layer) is prepared again. The workspace passed to plan and run is still checked
/// against the size (it is not part of the problem), and a call on host memory is validated again at each plan and
/// run: validation reads host arrays' contents (block tables, indices), which may have changed since prepare.

#include <cstddef>
#include <type_traits>

#include "mlakit/problems.h"
#include "mlakit/status.h"
#include "mlakit/types.h"

namespace mlakit {

class Backend;

/// The problems whose calls take a workspace (sized by workspace_bytes()): dense and sparse decode.
template <typename Problem>
inline constexpr bool kHasWorkspace =
    std::is_same_v<Problem, DecodeProblem> || std::is_same_v<Problem, SparseDecodeProblem>;

template <typename Problem>
class Prepared {
 public:
  Prepared() = default;

  /// The backend the call is bound to; null until Registry::prepare or Backend::prepare succeeded.
  const Backend* backend() const { return backend_; }
  /// The call as it was checked.
  const Problem& problem() const { return problem_; }
  /// Scratch bytes that plan and run need (decode and sparse decode; 0 for the other operations).
  size_t workspace_bytes() const { return workspace_bytes_; }

  /// Dense decode: the split-KV schedule into `ws` (Backend::plan without its checks).
  Status plan(Workspace ws, Stream stream) const
    requires std::is_same_v<Problem, DecodeProblem>;
  /// Dense decode (after plan) and sparse decode: the kernels (Backend::run without its checks).
  Status run(Workspace ws, Stream stream) const
    requires kHasWorkspace<Problem>;
  /// Every other operation.
  Status run(Stream stream) const
    requires(!kHasWorkspace<Problem>);

 private:
  friend class Backend;
  const Backend* backend_ = nullptr;
  Problem problem_{};
  size_t workspace_bytes_ = 0;
};

}  // namespace mlakit
