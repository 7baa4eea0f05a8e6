#pragma once
// Backend choice and execution shared by the one-shot operations (ops.cpp) and DecodePlan: the
// registry picks (or checks the named) backend, and the call runs with the GIL released.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "convert.h"
#include "workspace.h"

namespace mlakit::py {

/// The registry of every backend compiled into this module, built on first use.
const Registry& registry();

/// What `mlakit.select(...)` returns.
struct SelectionInfo {
  std::optional<std::string> backend;  ///< None when nothing can serve the call
  std::string reason;                  ///< why nothing was chosen ("" when a backend was)
  std::vector<std::pair<std::string, std::string>> passed_over;
  std::string explanation;             ///< Selection::explain()
};

Preference preference_of(nb::handle backend);

/// Selection for `p`; raises ValueError when the call itself is invalid (validate() failed or the
/// named backend does not exist): only "which backend" questions are answered, not "is this valid".
template <typename Problem>
SelectionInfo describe_selection(const Problem& p, nb::handle backend) {
  const Selection sel = registry().select(p, preference_of(backend));
  if (sel.status.code() == StatusCode::kInvalidArgument) throw_if_failed(sel.status);
  SelectionInfo info;
  if (sel.backend != nullptr) info.backend = sel.backend->name();
  if (!sel.status.ok()) info.reason = sel.status.message();
  for (const Rejection& r : sel.passed_over) info.passed_over.emplace_back(r.backend, r.reason);
  info.explanation = sel.explain();
  return info;
}

/// The backend that will run `p`; raises with the C++ message when there is none. For automatic
/// selection the message lists why each backend was passed over.
template <typename Problem>
const Backend& choose_backend(const Problem& p, nb::handle backend) {
  const Selection sel = registry().select(p, preference_of(backend));
  throw_if_failed(sel.failure());
  return *sel.backend;
}

/// `p` checked once and bound to the backend that will run it (Registry::prepare, include/mlakit/prepared.h); raises
/// as choose_backend does when there is none.
template <typename Problem>
Prepared<Problem> prepare_call(const Problem& p, nb::handle backend) {
  Prepared<Problem> call;
  throw_if_failed(registry().prepare(p, preference_of(backend), &call));
  return call;
}

/// Runs a prepared call (plan + run for decode, with a workspace of its size). Releases the GIL.
void execute(const Prepared<DecodeProblem>& c, Stream s, nb::handle workspace);
void execute(const Prepared<SparseDecodeProblem>& c, Stream s, nb::handle workspace);
template <typename Problem>
void execute(const Prepared<Problem>& c, Stream s, nb::handle /*workspace*/) {
  call_without_gil([&] { return c.run(s); });
}

}  // namespace mlakit::py
