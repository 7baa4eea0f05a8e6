// Sparse (top-k) decode, docs/spec.md section 2: query rows (b, i, *) attend to the cache rows listed in
// indices[b][i][0, topk_length[b]) as global ids page * P + offset. Negative ids are "no key";
// duplicates count as often as they appear; no causal mask. The optional attention sink scales the
// normalised output by 1 / (1 + exp(sink_h - LSE)) and leaves LSE unchanged.

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "reference/kv_rows.h"
#include "reference/ops.h"
#include "reference/parallel.h"
#include "reference/softmax_attention.h"
#include "reference/tensor_access.h"

namespace mlakit::reference {
namespace {

/// Columns of indices[b] that count: topk_length[b] when given (clamped to [0, topk]), else topk.
int64_t used_columns(const SparseDecodeProblem& p, int64_t b) {
  if (!p.topk_length.defined()) return p.topk();
  return std::clamp<int64_t>(load_int(p.topk_length, offset_of(p.topk_length, b)), 0, p.topk());
}

/// The reference reads host memory, so unlike a kernel it can reject ids past the cache before any
/// output is written.
Status check_indices(const SparseDecodeProblem& p) {
  const int64_t num_rows = p.kv.num_pages() * p.kv.page_size();
  for (int64_t b = 0; b < p.batch(); ++b) {
    const int64_t used = used_columns(p, b);
    for (int64_t i = 0; i < p.s_q(); ++i) {
      for (int64_t k = 0; k < used; ++k) {
        const int64_t id = load_int(p.indices, offset_of(p.indices, b, i, k));
        if (id >= num_rows) {
          return Status::invalid("indices[" + std::to_string(b) + "][" + std::to_string(i) + "][" +
                                 std::to_string(k) + "]=" + std::to_string(id) +
                                 ": must be < num_pages * page_size = " + std::to_string(num_rows) +
                                 " (negative means no key)");
        }
      }
    }
  }
  return {};
}

/// Dequantised rows of every valid id of indices[b][i], in column order, duplicates kept.
std::vector<float> load_selected_rows(const SparseDecodeProblem& p, int64_t b, int64_t i) {
  const int64_t d_qk = p.kv.dims.d_qk(), page_size = p.kv.page_size();
  std::vector<int64_t> ids;
  for (int64_t k = 0; k < used_columns(p, b); ++k) {
    const int64_t id = load_int(p.indices, offset_of(p.indices, b, i, k));
    if (id >= 0) ids.push_back(id);  // SPEC 2 Decision: every negative id is "no key"
  }
  std::vector<float> rows(ids.size() * size_t(d_qk));
  parallel_for(int64_t(ids.size()), [&](int64_t j) {
    const int64_t id = ids[size_t(j)];
    decode_kv_row(p.kv, kv_row_ptr(p.kv, id / page_size, id % page_size), rows.data() + j * d_qk);
  });
  return rows;
}

/// 1 / (1 + exp(sink_h - LSE)): 1 for sink = -inf, 0 for sink = +inf.
double sink_factor(const SparseDecodeProblem& p, int64_t h, double lse) {
  if (!p.attn_sink.defined()) return 1.0;
  const double sink = load_float(p.attn_sink, offset_of(p.attn_sink, h));
  return 1.0 / (1.0 + std::exp(sink - lse));
}

void attend_row(const SparseDecodeProblem& p, const std::vector<float>& rows, int64_t b, int64_t i, int64_t h) {
  const int64_t d_qk = p.kv.dims.d_qk(), d_v = p.kv.dims.d_v();
  const std::vector<float> q = load_floats(p.q, offset_of(p.q, b, i, h), d_qk);

  const KeyValueRows kv{rows.data(), d_qk, rows.data(), d_qk, int64_t(rows.size()) / d_qk};
  std::vector<double> out(static_cast<size_t>(d_v));
  const double lse = softmax_attention(q.data(), d_qk, kv, d_v, double(p.softmax_scale), out.data());
  const double factor = kv.n > 0 ? sink_factor(p, h, lse) : 1.0;  // an empty row stays 0 / -inf

  const int64_t out_base = offset_of(p.out, b, i, h);
  for (int64_t c = 0; c < d_v; ++c) store_float(p.out, out_base + c, float(out[size_t(c)] * factor));
  if (p.lse.defined()) store_float(p.lse, offset_of(p.lse, b, i, h), float(lse));
}

}  // namespace

Status sparse_decode(const SparseDecodeProblem& p) {
  MLAKIT_TRY(check_indices(p));
  const int64_t h_q = p.h_q();
  for (int64_t b = 0; b < p.batch(); ++b) {
    for (int64_t i = 0; i < p.s_q(); ++i) {
      const std::vector<float> rows = load_selected_rows(p, b, i);
      parallel_for(h_q, [&](int64_t h) { attend_row(p, rows, b, i, h); });
    }
  }
  return {};
}

}  // namespace mlakit::reference
