// validate() of prefill (docs/spec.md section 3) and of the merge forms (section 6).

#include <vector>

#include "core/check.h"

namespace mlakit {
namespace {

constexpr std::initializer_list<DType> kStateDTypes = {DType::kFP32, DType::kBF16, DType::kFP16};

/// cu_seqlens on the CPU: starts at 0, never decreases, ends within the token count.
Status cu_seqlens_contents(const TensorView& cu, std::string_view name, int64_t tokens) {
  const int32_t* v = cu.ptr<const int32_t>();
  const auto at = [&](int64_t i) { return int64_t(v[i * cu.stride[0]]); };
  const std::string n(name);
  MLAKIT_TRY(check::range(n + "[0]", at(0), 0, 0, "prefix sums start at 0"));
  for (int64_t i = 1; i < cu.shape[0]; ++i) {
    MLAKIT_TRY(check::range(n + "[" + std::to_string(i) + "]", at(i), at(i - 1), tokens,
                            "non-decreasing and within the " + std::to_string(tokens) + " tokens"));
  }
  return {};
}

/// Parts 1..n-1 of an [n, ...] tensor (none when n <= 1): what an in-place merge's out (part 0) must not touch. None
/// either without elements: an empty tensor's strides are never checked (it spans no byte), so never used.
TensorView parts_after_first(const TensorView& parts) {
  if (parts.shape[0] <= 1 || parts.numel() == 0) return {};
  TensorView rest = parts;
  rest.data = static_cast<uint8_t*>(parts.data) + parts.stride[0] * int64_t(dtype_size(parts.dtype));
  rest.shape[0] = parts.shape[0] - 1;
  return rest;
}

/// Merge reads element i of every input and writes element i of out (and lse), each element on its own: an input may
/// therefore share memory with out only element for element at the same index (the in-place form, exactly the same
/// elements) or not at all. Where the input has out's layout, whether any of its elements lies on one of out's at
/// another index is decided exactly (two interleaved columns of one array never meet); otherwise, or when undecided,
/// their byte spans must be disjoint.
Status keeps_off(const TensorView& out, const check::Operand& out_op, const TensorView& in,
                 const check::Operand& in_op, std::string_view rule) {
  if (!out.defined() || !in.defined() || check::same_elements(out, in)) return {};
  if (check::same_layout(out, in) && out.numel() > 0) {
    const auto elem = int64_t(dtype_size(out.dtype));
    const auto delta = int64_t(reinterpret_cast<uintptr_t>(in.data) - reinterpret_cast<uintptr_t>(out.data));
    if (delta % elem == 0 && check::elements_meet(check::index_differences(out), delta / elem) == 0) return {};
  }
  return check::disjoint(out_op, in_op, rule);
}

/// In place on part 0 of `parts` (n parts at parts.stride[0] elements from each other): no element of parts 1..n-1
/// may lie on one of out's at another index (it would be read after that element was written); decided exactly, or
/// by byte spans when undecided.
Status rest_keeps_off(const TensorView& out, const check::Operand& out_op, const TensorView& parts,
                      const TensorView& rest, std::string_view rest_name, std::string_view rule) {
  if (!rest.defined()) return {};
  std::vector<check::ElementAxis> axes = check::index_differences(out);
  axes.push_back({parts.stride[0], 1, parts.shape[0] - 1, /*guarded=*/false});  // which part; its index must differ
  if (check::elements_meet(std::move(axes), 0) == 0) return {};
  return check::disjoint(out_op, check::operand(rest, rest_name), rule);
}

}  // namespace

Status PrefillProblem::validate() const {
  MLAKIT_TRY(check::tensor(q, "q", {DType::kBF16, DType::kFP16}, 3, "[T_q, h_q, d_nope + d_r]"));
  const Device dev = q.device;
  MLAKIT_TRY(check::range("h_q", q.shape[1], 1, kMaxHeads, "q.shape[1]"));
  MLAKIT_TRY(check::range("q.shape[2]", q.shape[2], 1, INT32_MAX, "d_nope + d_r"));
  MLAKIT_TRY(check::tensor(k, "k", {q.dtype}, 3, "[T_k, h_q, d_nope + d_r]"));
  MLAKIT_TRY(check::tensor(v, "v", {q.dtype}, 3, "[T_k, h_q, d_vh]"));
  MLAKIT_TRY(check::dim(k, "k", 1, q.shape[1], "h_q"));
  MLAKIT_TRY(check::dim(k, "k", 2, q.shape[2], "q.shape[2]"));
  MLAKIT_TRY(check::dim(v, "v", 0, k.shape[0], "T_k"));
  MLAKIT_TRY(check::dim(v, "v", 1, q.shape[1], "h_q"));
  MLAKIT_TRY(check::range("v.shape[2]", v.shape[2], 1, INT32_MAX, "d_vh"));
  MLAKIT_TRY(check::tensor(cu_seqlens_q, "cu_seqlens_q", {DType::kInt32}, 1, "[b + 1]"));
  MLAKIT_TRY(check::tensor(cu_seqlens_k, "cu_seqlens_k", {DType::kInt32}, 1, "[b + 1]"));
  MLAKIT_TRY(check::range("cu_seqlens_q.shape[0]", cu_seqlens_q.shape[0], 2, INT32_MAX, "b + 1 with b >= 1"));
  MLAKIT_TRY(check::dim(cu_seqlens_k, "cu_seqlens_k", 0, cu_seqlens_q.shape[0], "b + 1"));
  MLAKIT_TRY(check::tensor(out, "out", {q.dtype}, 3, "[T_q, h_q, d_vh]"));
  MLAKIT_TRY(check::dim(out, "out", 0, q.shape[0], "T_q"));
  MLAKIT_TRY(check::dim(out, "out", 1, q.shape[1], "h_q"));
  MLAKIT_TRY(check::dim(out, "out", 2, v.shape[2], "d_vh"));
  MLAKIT_TRY(check::optional_tensor(lse, "lse", {DType::kFP32}, 2, "[T_q, h_q]"));
  if (lse.defined()) {
    MLAKIT_TRY(check::dim(lse, "lse", 0, q.shape[0], "T_q"));
    MLAKIT_TRY(check::dim(lse, "lse", 1, q.shape[1], "h_q"));
  }
  for (const auto& [t, name] : {std::pair{&k, "k"}, {&v, "v"}, {&cu_seqlens_q, "cu_seqlens_q"},
                                {&cu_seqlens_k, "cu_seqlens_k"}, {&out, "out"}, {&lse, "lse"}}) {
    MLAKIT_TRY(check::same_device(*t, name, dev, "q"));
  }
  MLAKIT_TRY(check::positive_finite("softmax_scale", softmax_scale, "there is no default: pass tau explicitly"));
  MLAKIT_TRY(check::no_alias({check::operand(out, "out"), check::operand(lse, "lse")},
                             {check::operand(q, "q"), check::operand(k, "k"), check::operand(v, "v"),
                              check::operand(cu_seqlens_q, "cu_seqlens_q"), check::operand(cu_seqlens_k, "cu_seqlens_k")}));

  if (dev.is_cpu()) {
    MLAKIT_TRY(cu_seqlens_contents(cu_seqlens_q, "cu_seqlens_q", q.shape[0]));
    MLAKIT_TRY(cu_seqlens_contents(cu_seqlens_k, "cu_seqlens_k", k.shape[0]));
    const auto len = [](const TensorView& cu, int64_t i) {
      return int64_t(cu.ptr<const int32_t>()[(i + 1) * cu.stride[0]] - cu.ptr<const int32_t>()[i * cu.stride[0]]);
    };
    for (int64_t i = 0; i < batch(); ++i) {
      const int64_t lq = len(cu_seqlens_q, i), lk = len(cu_seqlens_k, i);
      if (lk < lq) {
        return check::fail("Lk[" + std::to_string(i) + "]", lk,
                           "must be >= Lq[" + std::to_string(i) + "]=" + std::to_string(lq) +
                               " (queries are the last tokens of their sequence)");
      }
    }
  }
  return {};
}

Status MergeProblem::validate() const {
  MLAKIT_TRY(check::tensor(parts_out, "parts_out", kStateDTypes, 3, "[n, rows, d]"));
  const Device dev = parts_out.device;
  MLAKIT_TRY(check::range("parts_out.shape[0]", parts_out.shape[0], 1, INT32_MAX, "n, the number of parts"));
  MLAKIT_TRY(check::tensor(parts_lse, "parts_lse", {DType::kFP32}, 2, "[n, rows]"));
  MLAKIT_TRY(check::dim(parts_lse, "parts_lse", 0, parts_out.shape[0], "n"));
  MLAKIT_TRY(check::dim(parts_lse, "parts_lse", 1, parts_out.shape[1], "rows"));
  MLAKIT_TRY(check::tensor(out, "out", kStateDTypes, 2, "[rows, d]"));
  MLAKIT_TRY(check::dim(out, "out", 0, parts_out.shape[1], "rows"));
  MLAKIT_TRY(check::dim(out, "out", 1, parts_out.shape[2], "d"));
  MLAKIT_TRY(check::optional_tensor(lse, "lse", {DType::kFP32}, 1, "[rows]"));
  if (lse.defined()) MLAKIT_TRY(check::dim(lse, "lse", 0, parts_out.shape[1], "rows"));
  for (const auto& [t, name] : {std::pair{&parts_lse, "parts_lse"}, {&out, "out"}, {&lse, "lse"}}) {
    MLAKIT_TRY(check::same_device(*t, name, dev, "parts_out"));
  }
  // In place (docs/spec.md section 6) is out exactly part 0 of parts_out, lse exactly part 0 of parts_lse: each
  // element is then read before it is written, and no other part's element may lie on one of out's at another index
  // (rest_keeps_off). Any other overlap is rejected.
  MLAKIT_TRY(check::self_disjoint(out, "out"));
  MLAKIT_TRY(check::self_disjoint(lse, "lse"));
  const check::Operand o = check::operand(out, "out"), l = check::operand(lse, "lse");
  const check::Operand po = check::operand(parts_out, "parts_out"), pl = check::operand(parts_lse, "parts_lse");
  const TensorView out_rest = parts_after_first(parts_out), lse_rest = parts_after_first(parts_lse);
  if (!check::is_part0(out, parts_out)) {
    MLAKIT_TRY(check::disjoint(o, po, "outputs must not alias inputs (in place: out is exactly part 0 of parts_out)"));
  } else {
    MLAKIT_TRY(rest_keeps_off(out, o, parts_out, out_rest, "parts_out[1:]",
                              "in place, out (part 0 of parts_out) must not meet the other parts' elements"));
  }
  MLAKIT_TRY(check::disjoint(o, pl, "outputs must not alias inputs"));
  MLAKIT_TRY(check::disjoint(o, l, "outputs must not alias each other"));
  MLAKIT_TRY(check::disjoint(l, po, "outputs must not alias inputs"));
  if (!check::is_part0(lse, parts_lse)) {
    MLAKIT_TRY(check::disjoint(l, pl, "outputs must not alias inputs (in place: lse is exactly part 0 of parts_lse)"));
  } else {
    MLAKIT_TRY(rest_keeps_off(lse, l, parts_lse, lse_rest, "parts_lse[1:]",
                              "in place, lse (part 0 of parts_lse) must not meet the other parts' elements"));
  }
  return {};
}

Status MergePairProblem::validate() const {
  MLAKIT_TRY(check::tensor(out_a, "out_a", kStateDTypes, 2, "[rows, d]"));
  const Device dev = out_a.device;
  const int64_t rows = out_a.shape[0], d = out_a.shape[1];
  MLAKIT_TRY(check::tensor(out_b, "out_b", {out_a.dtype}, 2, "[rows, d]"));
  MLAKIT_TRY(check::dim(out_b, "out_b", 0, rows, "rows"));
  MLAKIT_TRY(check::dim(out_b, "out_b", 1, d, "d"));
  MLAKIT_TRY(check::tensor(lse_a, "lse_a", {DType::kFP32}, 1, "[rows]"));
  MLAKIT_TRY(check::dim(lse_a, "lse_a", 0, rows, "rows"));
  MLAKIT_TRY(check::tensor(lse_b, "lse_b", {DType::kFP32}, 1, "[rows]"));
  MLAKIT_TRY(check::dim(lse_b, "lse_b", 0, rows, "rows"));
  MLAKIT_TRY(check::tensor(out, "out", kStateDTypes, 2, "[rows, d]"));
  MLAKIT_TRY(check::dim(out, "out", 0, rows, "rows"));
  MLAKIT_TRY(check::dim(out, "out", 1, d, "d"));
  MLAKIT_TRY(check::optional_tensor(lse, "lse", {DType::kFP32}, 1, "[rows]"));
  if (lse.defined()) MLAKIT_TRY(check::dim(lse, "lse", 0, rows, "rows"));
  for (const auto& [t, name] : {std::pair{&out_b, "out_b"}, {&lse_a, "lse_a"}, {&lse_b, "lse_b"}, {&out, "out"},
                                {&lse, "lse"}}) {
    MLAKIT_TRY(check::same_device(*t, name, dev, "out_a"));
  }
  // In place (docs/spec.md section 6) is out exactly out_a or out_b, lse exactly lse_a or lse_b: each element is
  // read from both parts before it is written. The other part must then be the same elements too, or keep its
  // elements off out's (keeps_off: interleaved columns of one array do); any other overlap is rejected.
  MLAKIT_TRY(check::self_disjoint(out, "out"));
  MLAKIT_TRY(check::self_disjoint(lse, "lse"));
  const check::Operand o = check::operand(out, "out"), l = check::operand(lse, "lse");
  const check::Operand oa = check::operand(out_a, "out_a"), la = check::operand(lse_a, "lse_a");
  const check::Operand ob = check::operand(out_b, "out_b"), lb = check::operand(lse_b, "lse_b");
  constexpr auto kOutRule =
      "outputs must not alias inputs (in place: out is exactly out_a or out_b, and meets no element of the other)";
  constexpr auto kLseRule =
      "outputs must not alias inputs (in place: lse is exactly lse_a or lse_b, and meets no element of the other)";
  for (const auto& [view, op] : {std::pair{&out_a, &oa}, {&out_b, &ob}}) {
    MLAKIT_TRY(keeps_off(out, o, *view, *op, kOutRule));
  }
  for (const check::Operand* in : {&la, &lb}) MLAKIT_TRY(check::disjoint(o, *in, "outputs must not alias inputs"));
  MLAKIT_TRY(check::disjoint(o, l, "outputs must not alias each other"));
  for (const check::Operand* in : {&oa, &ob}) MLAKIT_TRY(check::disjoint(l, *in, "outputs must not alias inputs"));
  for (const auto& [view, op] : {std::pair{&lse_a, &la}, {&lse_b, &lb}}) {
    MLAKIT_TRY(keeps_off(lse, l, *view, *op, kLseRule));
  }
  return {};
}

}  // namespace mlakit
