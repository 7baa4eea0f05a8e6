#pragma once
// Backend choice shared by the nanobind module (dispatch.h) and the C++ torch operators (python/torch_ops/):
// plain C++, a failure as a Status that each binding raises its own way.

#include <string>

#include "mlakit/mlakit.h"

namespace mlakit::py {

/// The backend `registry` chooses for `p` under `preference`, in `*chosen`; or a failed Status whose message, for a
/// valid call that no backend serves, also says why each backend was passed over.
template <typename Problem>
Status choose(const Registry& registry, const Problem& p, const Preference& preference, const Backend** chosen) {
  const Selection sel = registry.select(p, preference);
  *chosen = sel.backend;
  return sel.failure();
}

}  // namespace mlakit::py
