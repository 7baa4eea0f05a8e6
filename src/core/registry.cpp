// Backend registry and automatic selection (docs/spec.md section 9): the highest-priority backend whose
// supports() says yes; every other backend is reported with its reason. A named backend is used or the
// call fails with its reason: nothing is rerouted silently.

#include "mlakit/registry.h"

#include <algorithm>

#include "core/problem_types.h"

namespace mlakit {

Status Registry::add(std::unique_ptr<Backend> backend) {
  if (!backend) return Status::invalid("backend=null: must be a backend");
  if (get(backend->name()) != nullptr) {
    return Status::invalid("backend.name=" + backend->name() + ": must be unique in the registry");
  }
  backends_.push_back(std::move(backend));
  std::stable_sort(backends_.begin(), backends_.end(),
                   [](const auto& a, const auto& b) { return a->priority() > b->priority(); });
  return {};
}

std::vector<const Backend*> Registry::list() const {
  std::vector<const Backend*> out;
  for (const auto& b : backends_) out.push_back(b.get());
  return out;
}

const Backend* Registry::get(std::string_view name) const {
  for (const auto& b : backends_) {
    if (b->name() == name) return b.get();
  }
  return nullptr;
}

template <typename Problem>
Selection Registry::select(const Problem& problem, const Preference& preference) const {
  Selection sel;
  if (Status v = problem.validate(); !v.ok()) {
    sel.status = v;
    return sel;
  }
  if (!preference.backend.empty()) {
    const Backend* named = get(preference.backend);
    if (named == nullptr) {
      std::string known;
      for (const auto& b : backends_) known += (known.empty() ? "" : ", ") + b->name();
      sel.status = Status::invalid("backend=" + preference.backend + ": must be one of " + known);
      return sel;
    }
    sel.status = named->supports(problem);
    if (sel.status.ok()) sel.backend = named;
    for (const auto& b : backends_) {
      if (b.get() != named) sel.passed_over.push_back({b->name(), "not requested (backend=" + preference.backend + ")"});
    }
    return sel;
  }
  for (const auto& b : backends_) {  // highest priority first
    if (sel.backend != nullptr) {
      sel.passed_over.push_back({b->name(), "lower priority than '" + sel.backend->name() + "'"});
      continue;
    }
    Status s = b->supports(problem);
    if (s.ok()) {
      sel.backend = b.get();
    } else {
      sel.passed_over.push_back({b->name(), s.message()});
    }
  }
  if (sel.backend == nullptr) sel.status = Status::not_supported("no backend supports this call (see passed_over)");
  return sel;
}

#define MLAKIT_INSTANTIATE_SELECT(Problem) template Selection Registry::select(const Problem&, const Preference&) const;
MLAKIT_PROBLEM_TYPES(MLAKIT_INSTANTIATE_SELECT)
#undef MLAKIT_INSTANTIATE_SELECT

Status Selection::failure() const {
  if (backend != nullptr) return {};
  std::string message = status.message();
  if (status.code() != StatusCode::kInvalidArgument) {
    for (const Rejection& r : passed_over) message += "; " + r.backend + ": " + r.reason;
  }
  return Status(status.code(), message);
}

template <typename Problem>
Status Registry::prepare(const Problem& problem, const Preference& preference, Prepared<Problem>* out) const {
  *out = Prepared<Problem>{};
  MLAKIT_TRY(problem.validate());
  if (preference.backend.empty()) {
    for (const auto& b : backends_) {  // highest priority first, as select() walks them
      if (b->prepare_valid(problem, out).ok()) return {};
    }
  } else if (const Backend* named = get(preference.backend); named != nullptr) {
    if (named->prepare_valid(problem, out).ok()) return {};
  }
  // Nothing took it: select() builds the same answer with every reason (the slow path, on failure only).
  return select(problem, preference).failure();
}

#define MLAKIT_INSTANTIATE_PREPARE(Problem) \
  template Status Registry::prepare(const Problem&, const Preference&, Prepared<Problem>*) const;
MLAKIT_PROBLEM_TYPES(MLAKIT_INSTANTIATE_PREPARE)
#undef MLAKIT_INSTANTIATE_PREPARE

std::string Selection::explain() const {
  std::string s = backend ? "chosen: " + backend->name() + "\n" : "chosen: none (" + status.to_string() + ")\n";
  for (const Rejection& r : passed_over) s += "passed over: " + r.backend + ": " + r.reason + "\n";
  return s;
}

}  // namespace mlakit
