// mlakit.DecodePlan: the plan/run split of docs/spec.md section 9 with the workspace owned by the object.
// Built once with the largest batch (its arrays fix backend, shapes and workspace size); plan() once
// per decoding step (reads seq_lens on the device), run() once per layer.

#include <nanobind/stl/string.h>

#include <string>

#include "cache.h"
#include "dispatch.h"
#include "ops.h"

namespace mlakit::py {
namespace {

using nb::arg;

class DecodePlan {
 public:
  DecodePlan(nb::handle q, nb::handle kv_cache, nb::handle block_table, nb::handle seq_lens, nb::handle out,
             nb::handle lse, float softmax_scale, bool causal, nb::handle shard, nb::handle block_table_indptr,
             nb::handle backend, nb::handle workspace) {
    problem_.q = layer_args_.view(q, "q", Access::kRead);
    problem_.kv = cache_view(layer_args_, kv_cache);
    problem_.out = layer_args_.view(out, "out", Access::kWrite);
    problem_.lse = layer_args_.optional(lse, "lse", Access::kWrite);
    problem_.block_table = block_table_args_.view(block_table, "block_table", Access::kRead);
    problem_.block_table_indptr = block_table_args_.optional(block_table_indptr, "block_table_indptr", Access::kRead);
    problem_.seq_lens = seq_lens_args_.view(seq_lens, "seq_lens", Access::kRead);
    problem_.softmax_scale = softmax_scale;
    problem_.causal = causal;
    problem_.shard = context_shard(shard);
    backend_ = &choose_backend(problem_, backend);
    workspace_ = OwnedWorkspace::make(problem_.device(), backend_->workspace_bytes(problem_), workspace);
  }

  /// Computes this step's schedule. New block_table / seq_lens arrays replace the stored ones (a new flat
  /// block_table comes with its block_table_indptr); the usual engine pattern (CUDA graphs) keeps the same arrays
  /// and updates their contents instead.
  void plan(nb::handle block_table, nb::handle seq_lens, nb::handle block_table_indptr, nb::handle stream) {
    if (!block_table.is_none()) {
      ArgHolder h;
      problem_.block_table = h.view(block_table, "block_table", Access::kRead);
      problem_.block_table_indptr = h.optional(block_table_indptr, "block_table_indptr", Access::kRead);
      block_table_args_ = std::move(h);
    } else if (!block_table_indptr.is_none()) {
      throw_conversion("block_table_indptr", "given without block_table: pass both, or neither to keep the stored ones");
    }
    if (!seq_lens.is_none()) {
      ArgHolder h;
      problem_.seq_lens = h.view(seq_lens, "seq_lens", Access::kRead);
      seq_lens_args_ = std::move(h);
    }
    check_workspace(problem_);
    const Stream s = resolve_stream(stream, layer_args_, problem_.device());
    call_without_gil([&] { return backend_->plan(problem_, workspace_.get(), s); });
    planned_ = true;
  }

  /// Runs one layer with the schedule of the last plan().
  void run(nb::handle q, nb::handle kv_cache, nb::handle out, nb::handle lse, nb::handle stream) {
    if (!planned_) {
      throw nb::value_error("DecodePlan.run: plan() has not been called; call it once per decoding step");
    }
    ArgHolder layer;
    DecodeProblem p = problem_;
    p.q = layer.view(q, "q", Access::kRead);
    p.kv = cache_view(layer, kv_cache);
    p.out = layer.view(out, "out", Access::kWrite);
    p.lse = layer.optional(lse, "lse", Access::kWrite);
    check_planned_shape(p);
    check_workspace(p);
    const Stream s = resolve_stream(stream, layer, p.device());
    call_without_gil([&] { return backend_->run(p, workspace_.get(), s); });
  }

  std::string backend_name() const { return backend_->name(); }
  size_t workspace_bytes() const { return workspace_.bytes(); }

 private:
  // plan() schedules the constructor's shapes: the query rows per request (s_q, h_q) and the cache's format and page
  // size fix a backend's partitions and tiles, so a run with others would read a schedule made for something else.
  void check_planned_shape(const DecodeProblem& p) const {
    // "field=value: must equal the DecodePlan's what=planned (...)", as validation words its messages.
    const auto same = [](const std::string& field, const char* what, const std::string& got,
                         const std::string& planned) {
      if (got == planned) return;
      throw_conversion((field + "=" + got).c_str(), std::string("must equal the DecodePlan's ") + what + "=" + planned +
                                                        " (build one DecodePlan per shape)");
    };
    const auto text = [](int64_t v) { return std::to_string(v); };
    if (p.q.ndim == 4 && problem_.q.ndim == 4) {
      same("q.shape[1]", "s_q", text(p.q.shape[1]), text(problem_.q.shape[1]));
      same("q.shape[2]", "h_q", text(p.q.shape[2]), text(problem_.q.shape[2]));
    }
    same("kv_cache.format", "format", kv_format_name(p.kv.format), kv_format_name(problem_.kv.format));
    if (p.kv.pages.ndim == 3 && problem_.kv.pages.ndim == 3) {
      same("kv_cache.page_size", "page_size", text(p.kv.page_size()), text(problem_.kv.page_size()));
    }
  }

  // A plan serves batches up to the one it was built with (docs/spec.md section 9).
  void check_workspace(const DecodeProblem& p) const {
    if (!p.validate().ok()) return;  // the backend call reports it, with validate()'s message
    const size_t need = backend_->workspace_bytes(p);
    if (need > workspace_.bytes()) {
      throw_conversion("workspace", std::to_string(need) + " bytes needed for batch " + std::to_string(p.batch()) +
                                        ", the plan holds " + std::to_string(workspace_.bytes()) +
                                        ": build the DecodePlan with the largest batch");
    }
  }

  ArgHolder layer_args_;  // q, cache, out, lse of the constructor (fix shapes; kept alive)
  ArgHolder block_table_args_;
  ArgHolder seq_lens_args_;
  DecodeProblem problem_;
  const Backend* backend_ = nullptr;
  OwnedWorkspace workspace_;
  bool planned_ = false;
};

}  // namespace

void bind_decode_plan(nb::module_& m) {
  nb::class_<DecodePlan>(m, "DecodePlan",
                         "Dense decode split into plan (once per step) and run (once per layer), holding its "
                         "workspace (docs/spec.md section 9). Build it with the largest batch it will serve.")
      .def(nb::init<nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, nb::handle, float, bool, nb::handle,
                    nb::handle, nb::handle, nb::handle>(),
           arg("q"), arg("kv_cache"), arg("block_table"), arg("seq_lens"), arg("out"), arg("lse") = nb::none(),
           nb::kw_only(), arg("softmax_scale"), arg("causal") = false, arg("shard") = nb::none(),
           arg("block_table_indptr") = nb::none(), arg("backend") = nb::none(), arg("workspace") = nb::none())
      .def("plan", &DecodePlan::plan, nb::kw_only(), arg("block_table") = nb::none(), arg("seq_lens") = nb::none(),
           arg("block_table_indptr") = nb::none(), arg("stream") = nb::none(),
           "Computes this step's split-KV schedule on the device from seq_lens (no host synchronisation).")
      .def("run", &DecodePlan::run, arg("q"), arg("kv_cache"), arg("out"), arg("lse") = nb::none(), nb::kw_only(),
           arg("stream") = nb::none(), "Runs decode for one layer with the schedule of the last plan().")
      .def_prop_ro("backend", &DecodePlan::backend_name, "the backend chosen at construction")
      .def_prop_ro("workspace_bytes", &DecodePlan::workspace_bytes);
}

}  // namespace mlakit::py
