#pragma once
// What a bench row reports when no backend takes its call.

#include "mlakit/registry.h"
#include "mlakit/status.h"

namespace mlakit::cli {

/// The selection's status with its explanation (the backend chosen or passed over, one per line) after the message.
inline Status selection_error(const Selection& sel) {
  return Status(sel.status.code(), sel.status.message() + "\n" + sel.explain());
}

}  // namespace mlakit::cli
