// make_default_registry(): walks the backend list that CMake generated from the backend folders
// (cmake/MlakitBackends.cmake), so this file never changes when a backend is added.

#include <memory>

#include "mlakit/registry.h"

namespace mlakit {

#define MLAKIT_BACKEND(factory) std::unique_ptr<Backend> factory();
#include "mlakit_backends.inc"
#undef MLAKIT_BACKEND

Registry make_default_registry() {
  Registry registry;
#define MLAKIT_BACKEND(factory) (void)registry.add(factory());  // names are unique by construction
#include "mlakit_backends.inc"
#undef MLAKIT_BACKEND
  return registry;
}

const char* version() { return MLAKIT_VERSION; }
std::string build_info() { return MLAKIT_BUILD_INFO; }

}  // namespace mlakit
