// mlakit._native: the compiled half of the `mlakit` package. Python code imports `mlakit`, not this.

#include "cache.h"
#include "ops.h"

NB_MODULE(_native, m) {
  namespace py = mlakit::py;
  m.doc() = "MLAKit bindings: DLPack arrays in, C++ problems validated and run by the chosen backend.";
  py::register_exceptions(m);
  py::bind_cache(m);
  py::bind_registry(m);
  py::bind_ops(m);
  py::bind_decode_plan(m);
  py::bind_helpers(m);
  py::bind_context_parallel(m);
}
