// Dense decode, docs/spec.md section 1: every query row attends to the visible rows of its request's paged
// cache. Each request's rows are dequantised once into float32 (shared by all s_q x h_q query rows,
// up to 8 x 128 for DeepSeek MTP) and the query rows then run in parallel.

#include <algorithm>
#include <vector>

#include "reference/kv_rows.h"
#include "reference/ops.h"
#include "reference/parallel.h"
#include "reference/softmax_attention.h"
#include "reference/tensor_access.h"

namespace mlakit::reference {
namespace {

/// Page k of request b: block_table[b][k], or block_table[block_table_indptr[b] + k] in the flat form.
int64_t request_page(const DecodeProblem& p, int64_t b, int64_t k) {
  if (!p.block_table_indptr.defined()) return load_int(p.block_table, offset_of(p.block_table, b, k));
  const int64_t first = load_int(p.block_table_indptr, offset_of(p.block_table_indptr, b));
  return load_int(p.block_table, offset_of(p.block_table, first + k));
}

/// Dequantised rows [0, len) of request `b` (its local tokens when sharded): token t is row t % P of the request's
/// page t / P. Only pages < ceil(L_b / P) and rows < L_b are read.
std::vector<float> load_request_rows(const DecodeProblem& p, int64_t b, int64_t len) {
  const int64_t d_qk = p.kv.dims.d_qk();
  const int64_t page_size = p.kv.page_size();
  std::vector<float> rows(static_cast<size_t>(len * d_qk));
  parallel_for(len, [&](int64_t t) {
    decode_kv_token(p.kv, request_page(p, b, t / page_size), t % page_size, rows.data() + t * d_qk);
  });
  return rows;
}

/// Keys query row `i` sees among the `len` rows of this rank: all, or under the causal rule the rank's tokens among
/// the global tokens j <= L_b - s_q + i (none when negative). Unsharded, the rank holds every token.
int64_t visible_keys(const DecodeProblem& p, int64_t global_len, int64_t len, int64_t i) {
  if (!p.causal) return len;
  return std::clamp<int64_t>(p.shard.owned_before(global_len - p.s_q() + i + 1), 0, len);
}

/// Query row (b, i, h) over the first `n_keys` rows of its request.
void attend_row(const DecodeProblem& p, const std::vector<float>& rows, int64_t n_keys, int64_t b, int64_t i,
                int64_t h) {
  const int64_t d_qk = p.kv.dims.d_qk(), d_v = p.kv.dims.d_v();
  const std::vector<float> q = load_floats(p.q, offset_of(p.q, b, i, h), d_qk);

  // V is the first d_c columns of the same row as K.
  const KeyValueRows kv{rows.data(), d_qk, rows.data(), d_qk, n_keys};
  std::vector<double> out(static_cast<size_t>(d_v));
  const double lse = softmax_attention(q.data(), d_qk, kv, d_v, double(p.softmax_scale), out.data());

  const int64_t out_base = offset_of(p.out, b, i, h);
  for (int64_t c = 0; c < d_v; ++c) store_float(p.out, out_base + c, float(out[size_t(c)]));
  if (p.lse.defined()) store_float(p.lse, offset_of(p.lse, b, i, h), float(lse));
}

}  // namespace

Status decode(const DecodeProblem& p) {
  const int64_t s_q = p.s_q(), h_q = p.h_q();
  parallel_outer(p.batch(), [&](int64_t b) {
    const int64_t global_len = load_int(p.seq_lens, offset_of(p.seq_lens, b));
    const int64_t len = p.shard.owned_before(global_len);  // docs/spec.md section 11: this rank's tokens
    const std::vector<float> rows = load_request_rows(p, b, len);
    parallel_for(s_q * h_q, [&](int64_t ih) {
      const int64_t i = ih / h_q, h = ih % h_q;
      attend_row(p, rows, visible_keys(p, global_len, len, i), b, i, h);
    });
  });
  return {};
}

}  // namespace mlakit::reference
