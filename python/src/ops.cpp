// One-shot bindings of every operation of docs/spec.md sections 1-8, each with a `select_<op>` twin that
// answers which backend would run the same call. A builder turns the Python arguments into the C++
// problem (conversion only); def_op() adds backend choice, the stream and execution.

#include <nanobind/stl/string.h>

#include <string>

#include "cache.h"
#include "dispatch.h"
#include "ops.h"

namespace mlakit::py {
namespace {

using nb::arg;

/// The arrays of one call, plus the workspace argument of decode / sparse_decode.
struct Call {
  ArgHolder args;
  nb::handle workspace;
};

// Scale given as a float (host value) or as a float32 array of one element on the device (read at
// run time). Returns the pointer, or null with `value` set.
const float* scalar_or_array(ArgHolder& args, nb::handle obj, const char* field, float* value) {
  if (obj.is_none()) return nullptr;
  if (PyFloat_Check(obj.ptr()) || PyLong_Check(obj.ptr())) {
    *value = nb::cast<float>(obj);
    return nullptr;
  }
  const TensorView v = args.view(obj, field, Access::kRead);
  if (v.dtype != DType::kFP32 || v.numel() < 1) {
    throw_conversion(field, v.describe() + ": must be a float or a float32 array of one element");
  }
  return v.ptr<const float>();
}

DecodeProblem build_decode(Call& c, nb::handle q, nb::handle kv_cache, nb::handle block_table, nb::handle seq_lens,
                           nb::handle out, nb::handle lse, float softmax_scale, bool causal, nb::handle shard,
                           nb::handle block_table_indptr, nb::handle workspace) {
  DecodeProblem p;
  p.q = c.args.view(q, "q", Access::kRead);
  p.kv = cache_view(c.args, kv_cache);
  p.block_table = c.args.view(block_table, "block_table", Access::kRead);
  p.block_table_indptr = c.args.optional(block_table_indptr, "block_table_indptr", Access::kRead);
  p.seq_lens = c.args.view(seq_lens, "seq_lens", Access::kRead);
  p.out = c.args.view(out, "out", Access::kWrite);
  p.lse = c.args.optional(lse, "lse", Access::kWrite);
  p.softmax_scale = softmax_scale;
  p.causal = causal;
  p.shard = context_shard(shard);
  c.workspace = workspace;
  return p;
}

SparseDecodeProblem build_sparse_decode(Call& c, nb::handle q, nb::handle kv_cache, nb::handle indices, nb::handle out,
                                        nb::handle lse, float softmax_scale, nb::handle topk_length,
                                        nb::handle attn_sink, nb::handle extra_kv_cache, nb::handle extra_indices,
                                        nb::handle extra_topk_length, nb::handle max_logits, nb::handle workspace) {
  SparseDecodeProblem p;
  p.q = c.args.view(q, "q", Access::kRead);
  p.kv = cache_view(c.args, kv_cache);
  p.indices = c.args.view(indices, "indices", Access::kRead);
  p.out = c.args.view(out, "out", Access::kWrite);
  p.lse = c.args.optional(lse, "lse", Access::kWrite);
  p.softmax_scale = softmax_scale;
  p.topk_length = c.args.optional(topk_length, "topk_length", Access::kRead);
  p.attn_sink = c.args.optional(attn_sink, "attn_sink", Access::kRead);
  p.extra_kv = cache_view_like(c.args, extra_kv_cache, p.kv, "extra_kv_cache");
  p.extra_indices = c.args.optional(extra_indices, "extra_indices", Access::kRead);
  p.extra_topk_length = c.args.optional(extra_topk_length, "extra_topk_length", Access::kRead);
  p.max_logits = c.args.optional(max_logits, "max_logits", Access::kWrite);
  c.workspace = workspace;
  return p;
}

PrefillProblem build_prefill(Call& c, nb::handle q, nb::handle k, nb::handle v, nb::handle cu_seqlens_q,
                             nb::handle cu_seqlens_k, nb::handle out, nb::handle lse, float softmax_scale,
                             bool causal) {
  PrefillProblem p;
  p.q = c.args.view(q, "q", Access::kRead);
  p.k = c.args.view(k, "k", Access::kRead);
  p.v = c.args.view(v, "v", Access::kRead);
  p.cu_seqlens_q = c.args.view(cu_seqlens_q, "cu_seqlens_q", Access::kRead);
  p.cu_seqlens_k = c.args.view(cu_seqlens_k, "cu_seqlens_k", Access::kRead);
  p.out = c.args.view(out, "out", Access::kWrite);
  p.lse = c.args.optional(lse, "lse", Access::kWrite);
  p.softmax_scale = softmax_scale;
  p.causal = causal;
  return p;
}

MergeProblem build_merge(Call& c, nb::handle parts_out, nb::handle parts_lse, nb::handle out, nb::handle lse) {
  MergeProblem p;
  p.parts_out = c.args.view(parts_out, "parts_out", Access::kRead);
  p.parts_lse = c.args.view(parts_lse, "parts_lse", Access::kRead);
  p.out = c.args.view(out, "out", Access::kWrite);
  p.lse = c.args.optional(lse, "lse", Access::kWrite);
  return p;
}

MergePairProblem build_merge_pair(Call& c, nb::handle out_a, nb::handle lse_a, nb::handle out_b, nb::handle lse_b,
                                  nb::handle out, nb::handle lse) {
  MergePairProblem p;
  p.out_a = c.args.view(out_a, "out_a", Access::kRead);
  p.lse_a = c.args.view(lse_a, "lse_a", Access::kRead);
  p.out_b = c.args.view(out_b, "out_b", Access::kRead);
  p.lse_b = c.args.view(lse_b, "lse_b", Access::kRead);
  p.out = c.args.view(out, "out", Access::kWrite);
  p.lse = c.args.optional(lse, "lse", Access::kWrite);
  return p;
}

AppendKvProblem build_append_kv(Call& c, nb::handle kv_c, nb::handle k_pe, nb::handle slot_mapping,
                                nb::handle kv_cache, nb::handle positions, nb::handle cos_sin,
                                const std::string& rope_style, nb::handle q, nb::handle q_fp8, nb::handle q_scale) {
  AppendKvProblem p;
  p.kv_c = c.args.view(kv_c, "kv_c", Access::kRead);
  p.k_pe = c.args.view(k_pe, "k_pe", Access::kRead);
  p.slot_mapping = c.args.view(slot_mapping, "slot_mapping", Access::kRead);
  p.cache = cache_view(c.args, kv_cache);
  p.positions = c.args.optional(positions, "positions", Access::kRead);
  p.cos_sin = c.args.optional(cos_sin, "cos_sin", Access::kRead);
  p.rope_style = parse_rope_style(rope_style);
  p.q = c.args.optional(q, "q", Access::kWrite);
  p.q_fp8 = c.args.optional(q_fp8, "q_fp8", Access::kWrite);
  p.q_scale = scalar_or_array(c.args, q_scale, "q_scale", &p.q_scale_value);
  return p;
}

RopeProblem build_rope(Call& c, nb::handle x, nb::handle positions, nb::handle cos_sin, const std::string& style) {
  RopeProblem p;
  p.x = c.args.view(x, "x", Access::kWrite);
  p.positions = c.args.view(positions, "positions", Access::kRead);
  p.cos_sin = c.args.view(cos_sin, "cos_sin", Access::kRead);
  p.style = parse_rope_style(style);
  return p;
}

GatherKvProblem build_gather_kv(Call& c, nb::handle kv_cache, nb::handle block_table, nb::handle seq_lens,
                                nb::handle cu_out, nb::handle out) {
  GatherKvProblem p;
  p.cache = cache_view(c.args, kv_cache);
  p.block_table = c.args.view(block_table, "block_table", Access::kRead);
  p.seq_lens = c.args.view(seq_lens, "seq_lens", Access::kRead);
  p.cu_out = c.args.view(cu_out, "cu_out", Access::kRead);
  p.out = c.args.view(out, "out", Access::kWrite);
  return p;
}

/// Binds `<op>_workspace_bytes(same arguments)`: the bytes a `workspace=` array must hold.
template <typename Problem, typename... Args, typename... Extra>
void def_workspace_bytes(nb::module_& m, const char* name, Problem (*build)(Call&, Args...), const Extra&... extra) {
  m.def(
      name,
      [build](Args... a, nb::handle backend, nb::handle /*stream*/) {
        Call call;
        const Problem p = build(call, a...);
        return prepare_call(p, backend).workspace_bytes();
      },
      extra..., arg("backend") = nb::none(), arg("stream") = nb::none(),
      "Bytes of workspace the chosen backend needs for this call (pass workspace= a uint8 array that large, "
      "e.g. allocated by your framework so that CUDA graph capture sees it). Nothing runs.");
}

/// Binds the two halves of decode for callers that own the workspace across calls (the torch custom
/// ops, where no Python object can live between plan and run): `decode_plan_step` writes the schedule
/// into `workspace`, `decode_run_step` reads it. `workspace` is required.
template <typename... Extra>
void def_decode_steps(nb::module_& m, const Extra&... extra) {
  enum class Half { kPlan, kRun };
  const auto step = [](Half half) {
    return [half](nb::handle q, nb::handle kv_cache, nb::handle block_table, nb::handle seq_lens, nb::handle out,
                  nb::handle lse, float softmax_scale, bool causal, nb::handle shard, nb::handle block_table_indptr,
                  nb::handle workspace, nb::handle backend, nb::handle stream) {
      if (workspace.is_none()) throw_conversion("workspace", "is required (the plan lives in it between the two calls)");
      Call call;
      const DecodeProblem p = build_decode(call, q, kv_cache, block_table, seq_lens, out, lse, softmax_scale, causal,
                                           shard, block_table_indptr, workspace);
      const Prepared<DecodeProblem> prepared = prepare_call(p, backend);
      OwnedWorkspace ws = OwnedWorkspace::make(p.device(), prepared.workspace_bytes(), workspace);
      const Stream s = resolve_stream(stream, call.args, p.device());
      call_without_gil([&] { return half == Half::kPlan ? prepared.plan(ws.get(), s) : prepared.run(ws.get(), s); });
    };
  };
  m.def("decode_plan_step", step(Half::kPlan), extra..., arg("backend") = nb::none(), arg("stream") = nb::none(),
        "The plan half of decode: writes this step's schedule into workspace (from seq_lens, on the device).");
  m.def("decode_run_step", step(Half::kRun), extra..., arg("backend") = nb::none(), arg("stream") = nb::none(),
        "The run half of decode: reads the schedule decode_plan_step left in workspace.");
}

/// Binds `name(args..., *, backend=None, stream=None)` and `select_name(...)` with the same signature.
/// `extra` holds the nb::arg list of the builder's arguments and must contain nb::kw_only().
template <typename Problem, typename... Args, typename... Extra>
void def_op(nb::module_& m, const char* name, const char* select_name, Problem (*build)(Call&, Args...),
            const char* doc, const Extra&... extra) {
  m.def(
      name,
      [build](Args... a, nb::handle backend, nb::handle stream) {
        Call call;
        const Problem p = build(call, a...);
        execute(prepare_call(p, backend), resolve_stream(stream, call.args, p.device()), call.workspace);
      },
      extra..., arg("backend") = nb::none(), arg("stream") = nb::none(), doc);
  m.def(
      select_name,
      [build](Args... a, nb::handle backend, nb::handle /*stream*/) {
        Call call;
        const Problem p = build(call, a...);
        return describe_selection(p, backend);
      },
      extra..., arg("backend") = nb::none(), arg("stream") = nb::none(),
      "Which backend the same call would run on, and why every other one was passed over. Nothing runs.");
}

}  // namespace

void bind_ops(nb::module_& m) {
  def_op(m, "decode", "select_decode", &build_decode,
         "Dense decode (docs/spec.md section 1) in one call: plans and runs with a temporary workspace. "
         "Engines decoding many layers per step should use DecodePlan.",
         arg("q"), arg("kv_cache"), arg("block_table"), arg("seq_lens"), arg("out"), arg("lse") = nb::none(),
         nb::kw_only(), arg("softmax_scale"), arg("causal") = false, arg("shard") = nb::none(),
         arg("block_table_indptr") = nb::none(), arg("workspace") = nb::none());
  def_workspace_bytes(m, "decode_workspace_bytes", &build_decode, arg("q"), arg("kv_cache"), arg("block_table"),
                      arg("seq_lens"), arg("out"), arg("lse") = nb::none(), nb::kw_only(), arg("softmax_scale"),
                      arg("causal") = false, arg("shard") = nb::none(), arg("block_table_indptr") = nb::none(),
                      arg("workspace") = nb::none());
  def_decode_steps(m, arg("q"), arg("kv_cache"), arg("block_table"), arg("seq_lens"), arg("out"),
                   arg("lse") = nb::none(), nb::kw_only(), arg("softmax_scale"), arg("causal") = false,
                   arg("shard") = nb::none(), arg("block_table_indptr") = nb::none(), arg("workspace"));
  def_op(m, "sparse_decode", "select_sparse_decode", &build_sparse_decode,
         "Sparse top-k decode over global row ids (docs/spec.md section 2); with extra_kv_cache and extra_indices "
         "(DeepSeek V4), one softmax over the ids of both caches.",
         arg("q"), arg("kv_cache"), arg("indices"), arg("out"), arg("lse") = nb::none(), nb::kw_only(),
         arg("softmax_scale"), arg("topk_length") = nb::none(), arg("attn_sink") = nb::none(),
         arg("extra_kv_cache") = nb::none(), arg("extra_indices") = nb::none(), arg("extra_topk_length") = nb::none(),
         arg("max_logits") = nb::none(), arg("workspace") = nb::none());
  def_workspace_bytes(m, "sparse_decode_workspace_bytes", &build_sparse_decode, arg("q"), arg("kv_cache"),
                      arg("indices"), arg("out"), arg("lse") = nb::none(), nb::kw_only(), arg("softmax_scale"),
                      arg("topk_length") = nb::none(), arg("attn_sink") = nb::none(),
                      arg("extra_kv_cache") = nb::none(), arg("extra_indices") = nb::none(),
                      arg("extra_topk_length") = nb::none(), arg("max_logits") = nb::none(),
                      arg("workspace") = nb::none());
  def_op(m, "prefill", "select_prefill", &build_prefill,
         "Ragged prefill in the non-absorbed MHA form (docs/spec.md section 3).", arg("q"), arg("k"), arg("v"),
         arg("cu_seqlens_q"), arg("cu_seqlens_k"), arg("out"), arg("lse") = nb::none(), nb::kw_only(),
         arg("softmax_scale"), arg("causal") = false);
  def_op(m, "merge", "select_merge", &build_merge,
         "Merges n partial attention states (docs/spec.md section 6). In place when out/lse alias part 0.",
         arg("parts_out"), arg("parts_lse"), arg("out"), arg("lse") = nb::none(), nb::kw_only());
  def_op(m, "merge_pair", "select_merge_pair", &build_merge_pair,
         "Merges two partial attention states (docs/spec.md section 6). In place when out/lse alias out_a/lse_a.",
         arg("out_a"), arg("lse_a"), arg("out_b"), arg("lse_b"), arg("out"), arg("lse") = nb::none(), nb::kw_only());
  def_op(m, "append_kv", "select_append_kv", &build_append_kv,
         "Writes new tokens into the paged cache (docs/spec.md section 7), optionally rotating k_pe (and q in "
         "place) with RoPE and emitting q in fp8.",
         arg("kv_c"), arg("k_pe"), arg("slot_mapping"), arg("kv_cache"), nb::kw_only(), arg("positions") = nb::none(),
         arg("cos_sin") = nb::none(), arg("rope_style") = "interleaved", arg("q") = nb::none(),
         arg("q_fp8") = nb::none(), arg("q_scale") = nb::none());
  def_op(m, "rope", "select_rope", &build_rope, "Applies RoPE to x in place (docs/spec.md section 7).", arg("x"),
         arg("positions"), arg("cos_sin"), nb::kw_only(), arg("style") = "interleaved");
  def_op(m, "gather_kv", "select_gather_kv", &build_gather_kv,
         "Dequantised cache rows of every request, concatenated, as bf16 (docs/spec.md section 8).", arg("kv_cache"),
         arg("block_table"), arg("seq_lens"), arg("cu_out"), arg("out"), nb::kw_only());
}

}  // namespace mlakit::py
