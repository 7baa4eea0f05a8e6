// Merging partial attention states, docs/spec.md section 6:
//   M = max_s L_s,  L = M + ln sum_s exp(L_s - M),  O = sum_s exp(L_s - L) O_s
// with L = -inf and O = 0 when every L_s = -inf. Parts with L_s = -inf carry no keys and are skipped, so
// whatever their O_s holds (even NaN) cannot leak into the result. Each output element is written only
// after every part's element at the same index was read, so `out` may alias part 0 (in place).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reference/ops.h"
#include "reference/parallel.h"
#include "reference/tensor_access.h"

namespace mlakit::reference {
namespace {

/// One partial state: out [rows, d] and lse [rows].
struct Part {
  TensorView out;
  TensorView lse;
};

/// Drops the leading dimension of `t` at index `s` (part s of an [n, ...] tensor). A tensor without elements (d = 0)
/// keeps its pointer: validation leaves its strides unchecked (it spans no byte), so they may be anything.
TensorView slice_leading(const TensorView& t, int64_t s) {
  TensorView v = t;
  if (t.numel() > 0) v.data = static_cast<uint8_t*>(t.data) + s * t.stride[0] * int64_t(dtype_size(t.dtype));
  v.ndim = t.ndim - 1;
  for (int k = 0; k + 1 < kMaxDims; ++k) {
    v.shape[k] = t.shape[k + 1];
    v.stride[k] = t.stride[k + 1];
  }
  v.shape[kMaxDims - 1] = 0;
  v.stride[kMaxDims - 1] = 0;
  return v;
}

void merge_row(const std::vector<Part>& parts, const TensorView& out, const TensorView& lse, int64_t r) {
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  std::vector<double> part_lse(parts.size());
  double max_lse = kNegInf;
  for (size_t s = 0; s < parts.size(); ++s) {
    part_lse[s] = load_float(parts[s].lse, offset_of(parts[s].lse, r));
    max_lse = std::max(max_lse, part_lse[s]);
  }
  double sum = 0.0;
  if (max_lse != kNegInf) {
    for (double l : part_lse) sum += std::exp(l - max_lse);  // exp(-inf) = 0 for empty parts
  }
  const double merged_lse = max_lse == kNegInf ? kNegInf : max_lse + std::log(sum);

  std::vector<double> weight(parts.size(), 0.0);
  for (size_t s = 0; s < parts.size(); ++s) {
    if (part_lse[s] != kNegInf) weight[s] = std::exp(part_lse[s] - merged_lse);
  }
  const int64_t d = out.shape[1];
  for (int64_t c = 0; c < d; ++c) {
    double acc = 0.0;
    for (size_t s = 0; s < parts.size(); ++s) {
      if (weight[s] != 0.0) acc += weight[s] * load_float(parts[s].out, offset_of(parts[s].out, r, c));
    }
    store_float(out, offset_of(out, r, c), float(acc));
  }
  if (lse.defined()) store_float(lse, offset_of(lse, r), float(merged_lse));
}

Status merge_parts(const std::vector<Part>& parts, const TensorView& out, const TensorView& lse) {
  parallel_for(out.shape[0], [&](int64_t r) { merge_row(parts, out, lse, r); });
  return {};
}

}  // namespace

Status merge(const MergeProblem& p) {
  if (p.out.shape[0] == 0) return {};  // no rows: the strides of empty tensors may be anything, never use them
  std::vector<Part> parts;
  for (int64_t s = 0; s < p.parts_out.shape[0]; ++s) {
    parts.push_back({slice_leading(p.parts_out, s), slice_leading(p.parts_lse, s)});
  }
  return merge_parts(parts, p.out, p.lse);
}

Status merge_pair(const MergePairProblem& p) {
  return merge_parts({{p.out_a, p.lse_a}, {p.out_b, p.lse_b}}, p.out, p.lse);
}

}  // namespace mlakit::reference
