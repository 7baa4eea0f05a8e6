#pragma once
// The one softmax-attention loop of the reference, shared by dense decode (docs/spec.md 1), sparse decode
// (docs/spec.md 2) and prefill (docs/spec.md 3): one query over n keys already dequantised to float32.
// Accumulates in float64 (cheap here and keeps the oracle's own error far below docs/spec.md 10 tolerances).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "reference/tensor_access.h"

namespace mlakit::reference {

/// Elements [base, base + n) of a floating-point tensor (one contiguous last-dimension row) as float32.
inline std::vector<float> load_floats(const TensorView& t, int64_t base, int64_t n) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) values[static_cast<size_t>(c)] = load_float(t, base + c);
  return values;
}

/// Key j is keys[j * key_stride + c] for c < d_qk, value j is values[j * value_stride + c] for c < d_v.
struct KeyValueRows {
  const float* keys;
  int64_t key_stride;
  const float* values;
  int64_t value_stride;
  int64_t n;  ///< number of keys; 0 gives out = 0 and lse = -inf (docs/spec.md 1, empty rows)
};

/// out[c] = sum_j softmax(scale * <q, K_j>)_j * V_j[c] for c < d_v; returns LSE = ln sum_j exp(s_j).
inline double softmax_attention(const float* q, int64_t d_qk, const KeyValueRows& kv, int64_t d_v,
                                double scale, double* out) {
  std::fill(out, out + d_v, 0.0);
  if (kv.n == 0) return -std::numeric_limits<double>::infinity();
  std::vector<double> score(static_cast<size_t>(kv.n));
  double max_score = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < kv.n; ++j) {
    const float* k = kv.keys + j * kv.key_stride;
    double dot = 0.0;
    for (int64_t c = 0; c < d_qk; ++c) dot += double(q[c]) * double(k[c]);
    score[size_t(j)] = scale * dot;
    max_score = std::max(max_score, score[size_t(j)]);
  }
  double sum = 0.0;
  for (int64_t j = 0; j < kv.n; ++j) {
    const double w = std::exp(score[size_t(j)] - max_score);  // <= 1: no overflow
    sum += w;
    const float* v = kv.values + j * kv.value_stride;
    for (int64_t c = 0; c < d_v; ++c) out[c] += w * double(v[c]);
  }
  for (int64_t c = 0; c < d_v; ++c) out[c] /= sum;
  return max_score + std::log(sum);
}

}  // namespace mlakit::reference
