// Sparse (top-k) decode, docs/spec.md section 2: query rows (b, i, *) attend to the cache rows listed in
// indices[b][i][0, topk_length[b]) as global ids page * P + offset. Negative ids are "no key";
// duplicates count as often as they appear; no causal mask. The optional attention sink scales the
// normalised output by 1 / (1 + exp(sink_h - LSE)) and leaves LSE unchanged. An extra cache (DeepSeek V4) adds
// the valid ids of extra_indices[b][i][0, extra_topk_length[b]) to the same softmax; with V4's geometry V is the
// whole row (kv.dims.d_v() = d_qk).

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/kv_rows.h"
#include "reference/ops.h"
#include "reference/parallel.h"
#include "reference/softmax_attention.h"
#include "reference/tensor_access.h"

namespace mlakit::reference {
namespace {

/// One set of keys: the main cache with indices and topk_length, or the extra cache with its own.
struct KeySet {
  const KvCacheView& kv;
  const TensorView& indices;
  const TensorView& lengths;  // may be undefined
  const char* name;           // for messages
};

std::vector<KeySet> key_sets(const SparseDecodeProblem& p) {
  std::vector<KeySet> sets{{p.kv, p.indices, p.topk_length, "indices"}};
  if (p.has_extra()) sets.push_back({p.extra_kv, p.extra_indices, p.extra_topk_length, "extra_indices"});
  return sets;
}

/// Columns of a set's indices[b] that count: its length[b] when given (clamped to [0, topk]), else topk.
int64_t used_columns(const KeySet& s, int64_t b) {
  const int64_t topk = s.indices.shape[2];
  if (!s.lengths.defined()) return topk;
  return std::clamp<int64_t>(load_int(s.lengths, offset_of(s.lengths, b)), 0, topk);
}

/// The reference reads host memory, so unlike a kernel it can reject ids past the cache before any
/// output is written.
Status check_indices(const SparseDecodeProblem& p) {
  for (const KeySet& s : key_sets(p)) {
    const int64_t num_rows = s.kv.num_pages() * s.kv.page_size();
    for (int64_t b = 0; b < p.batch(); ++b) {
      const int64_t used = used_columns(s, b);
      for (int64_t i = 0; i < p.s_q(); ++i) {
        for (int64_t k = 0; k < used; ++k) {
          const int64_t id = load_int(s.indices, offset_of(s.indices, b, i, k));
          if (id >= num_rows) {
            return Status::invalid(std::string(s.name) + "[" + std::to_string(b) + "][" + std::to_string(i) + "][" +
                                   std::to_string(k) + "]=" + std::to_string(id) +
                                   ": must be < num_pages * page_size = " + std::to_string(num_rows) +
                                   " (negative means no key)");
          }
        }
      }
    }
  }
  return {};
}

/// Dequantised rows of every valid id of indices[b][i] (then of extra_indices[b][i]), in column order,
/// duplicates kept.
std::vector<float> load_selected_rows(const SparseDecodeProblem& p, int64_t b, int64_t i) {
  const int64_t d_qk = p.kv.dims.d_qk();
  struct Key {
    const KvCacheView* kv;
    int64_t id;
  };
  std::vector<Key> keys;
  for (const KeySet& s : key_sets(p)) {
    for (int64_t k = 0; k < used_columns(s, b); ++k) {
      const int64_t id = load_int(s.indices, offset_of(s.indices, b, i, k));
      if (id >= 0) keys.push_back({&s.kv, id});  // SPEC 2 Decision: every negative id is "no key"
    }
  }
  std::vector<float> rows(keys.size() * size_t(d_qk));
  parallel_for(int64_t(keys.size()), [&](int64_t j) {
    const Key& key = keys[size_t(j)];
    const int64_t page_size = key.kv->page_size();
    decode_kv_token(*key.kv, key.id / page_size, key.id % page_size, rows.data() + j * d_qk);
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
  if (p.max_logits.defined()) {  // tau * <q, K_j>, the largest over the row's keys; -inf when it has none
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t j = 0; j < kv.n; ++j) {
      double dot = 0.0;
      for (int64_t c = 0; c < d_qk; ++c) dot += double(q[size_t(c)]) * double(rows[size_t(j * d_qk + c)]);
      m = std::max(m, dot * double(p.softmax_scale));
    }
    store_float(p.max_logits, offset_of(p.max_logits, b, i, h), float(m));
  }
  const double factor = kv.n > 0 ? sink_factor(p, h, lse) : 1.0;  // an empty row stays 0 / -inf

  const int64_t out_base = offset_of(p.out, b, i, h);
  for (int64_t c = 0; c < d_v; ++c) store_float(p.out, out_base + c, float(out[size_t(c)] * factor));
  if (p.lse.defined()) store_float(p.lse, offset_of(p.lse, b, i, h), float(lse));
}

}  // namespace

Status sparse_decode(const SparseDecodeProblem& p) {
  MLAKIT_TRY(check_indices(p));
  const int64_t h_q = p.h_q();
  const int64_t s_q = p.s_q();
  parallel_outer(p.batch() * s_q, [&](int64_t bi) {
    const int64_t b = bi / s_q, i = bi % s_q;
    const std::vector<float> rows = load_selected_rows(p, b, i);
    parallel_for(h_q, [&](int64_t h) { attend_row(p, rows, b, i, h); });
  });
  return {};
}

}  // namespace mlakit::reference
