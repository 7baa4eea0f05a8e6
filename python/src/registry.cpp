// Backend list, selection results, and the execution of the operations that need a workspace.

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "dispatch.h"
#include "ops.h"

namespace mlakit::py {
namespace {

/// What `mlakit.backends()` lists for each backend.
struct BackendInfo {
  std::string name;
  std::string description;
  std::string device;
  int priority = 0;
  std::vector<std::pair<std::string, std::string>> features;  ///< (op name, detail)
  bool available = false;
  std::string unavailable_reason;  ///< "" when available
};

BackendInfo info_of(const Backend& b) {
  BackendInfo info;
  info.name = b.name();
  info.description = b.description();
  info.device = b.device_type() == DeviceType::kCPU ? "cpu" : "cuda";
  info.priority = b.priority();
  for (const Feature& f : b.features()) info.features.emplace_back(op_name(f.op), f.detail);
  const Status s = b.available();
  info.available = s.ok();
  info.unavailable_reason = s.ok() ? "" : s.message();
  return info;
}

}  // namespace

const Registry& registry() {
  static const Registry r = make_default_registry();
  return r;
}

Preference preference_of(nb::handle backend) {
  Preference pref;
  if (backend.is_valid() && !backend.is_none()) pref.backend = nb::cast<std::string>(backend);
  return pref;
}

void execute(const Prepared<DecodeProblem>& c, Stream s, nb::handle workspace) {
  OwnedWorkspace ws = OwnedWorkspace::make(c.problem().device(), c.workspace_bytes(), workspace);
  call_without_gil([&] {
    const Status planned = c.plan(ws.get(), s);
    return planned.ok() ? c.run(ws.get(), s) : planned;
  });
}

void execute(const Prepared<SparseDecodeProblem>& c, Stream s, nb::handle workspace) {
  OwnedWorkspace ws = OwnedWorkspace::make(c.problem().device(), c.workspace_bytes(), workspace);
  call_without_gil([&] { return c.run(ws.get(), s); });
}

void bind_registry(nb::module_& m) {
  nb::class_<BackendInfo>(m, "BackendInfo", "One backend compiled into this build (mlakit.backends()).")
      .def_ro("name", &BackendInfo::name)
      .def_ro("description", &BackendInfo::description)
      .def_ro("device", &BackendInfo::device, "'cpu' or 'cuda': the device whose arrays it takes")
      .def_ro("priority", &BackendInfo::priority, "automatic selection prefers higher values")
      .def_ro("features", &BackendInfo::features, "(op, detail) pairs: what it implements")
      .def_ro("available", &BackendInfo::available, "whether it can run on this machine (for a CUDA backend: on the current device)")
      .def_ro("unavailable_reason", &BackendInfo::unavailable_reason, "why not, when available is False")
      .def("__repr__", [](const BackendInfo& b) {
        return "BackendInfo(name='" + b.name + "', device='" + b.device + "', available=" +
               (b.available ? "True" : "False") + ")";
      });

  nb::class_<SelectionInfo>(m, "Selection", "Which backend a call would run on (mlakit.select()).")
      .def_ro("backend", &SelectionInfo::backend, "the chosen backend's name, None when none can serve the call")
      .def_ro("reason", &SelectionInfo::reason, "why nothing was chosen ('' when a backend was)")
      .def_ro("passed_over", &SelectionInfo::passed_over, "(backend, reason) for every backend not chosen")
      .def("explain", [](const SelectionInfo& s) { return s.explanation; }, "multi-line explanation")
      .def("__bool__", [](const SelectionInfo& s) { return s.backend.has_value(); })
      .def("__repr__", [](const SelectionInfo& s) {
        return "Selection(backend=" + (s.backend ? "'" + *s.backend + "'" : std::string("None")) + ", passed_over=" +
               std::to_string(s.passed_over.size()) + ")";
      });

  m.def(
      "backends",
      [] {
        std::vector<BackendInfo> out;
        for (const Backend* b : registry().list()) out.push_back(info_of(*b));
        return out;
      },
      "Every backend compiled into this build, highest priority first (unavailable ones included, with why).");
}

}  // namespace mlakit::py
