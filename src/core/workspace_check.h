#pragma once
// The workspace test shared by Backend's entry points and prepared calls (prepared.cpp): the workspace is not part of
// the problem, so even a prepared call checks it on every plan and run.

#include <cstddef>
#include <string>

#include "mlakit/status.h"
#include "mlakit/types.h"

namespace mlakit {

/// A workspace smaller than the backend asked for would be written out of bounds: refuse it.
inline Status check_workspace(const Workspace& ws, size_t needed) {
  if (ws.bytes >= needed && (needed == 0 || ws.data != nullptr)) return {};
  return Status::invalid("workspace.bytes=" + std::to_string(ws.bytes) + ": must be >= workspace_bytes(problem)=" +
                         std::to_string(needed) + (ws.data == nullptr ? " with non-null data" : ""));
}

}  // namespace mlakit
