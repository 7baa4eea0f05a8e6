#pragma once
// Host buffers of one ragged prefill call (docs/spec.md section 3) for the CPU and GPU tests: random q, k, v
// with strided token rows whose padding is NaN-poisoned, NaN-poisoned outputs, and the PrefillProblem over them.

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "mlakit/problems.h"

namespace mlakit::test {

struct Geometry {
  int64_t d_qk;  // d_nope + d_r
  int64_t d_vh;
};

struct PrefillCaseConfig {
  std::vector<std::pair<int32_t, int32_t>> lens;  // (Lq_b, Lk_b) per request, Lk_b >= Lq_b
  int64_t h_q = 2;
  Geometry geometry{192, 128};  // DeepSeek MHA 192/128
  DType dtype = DType::kBF16;
  bool causal = false;
  int64_t token_padding = 8;  // extra poisoned elements after each token's h_q * d values
  int64_t out_head_stride = 0;  // out's stride over heads in elements; 0: contiguous (d_vh)
  int64_t in_head_stride = 0;   // q, k and v's stride over heads in elements (h_q = 1 only: never stepped); 0: d
  uint64_t seed = 1;
};

/// q, k, v have token stride h_q * d + token_padding; out (but for cfg.out_head_stride) and lse are contiguous and
/// poisoned.
struct PrefillCase {
  PrefillCaseConfig cfg;
  int64_t t_q = 0, t_k = 0;
  std::vector<int32_t> cu_q, cu_k;
  std::vector<uint16_t> q, k, v, out;
  std::vector<float> lse;

  static PrefillCase generate(const PrefillCaseConfig& cfg);
  int64_t token_stride(int64_t d) const { return cfg.h_q * d + cfg.token_padding; }
  /// The call over these host buffers.
  PrefillProblem problem();
  /// Element c of head h of `token` in a q/k (d = d_qk) or v (d = d_vh) buffer, as float64.
  double value(const std::vector<uint16_t>& bits, int64_t token, int64_t h, int64_t d, int64_t c) const;

 private:
  std::vector<uint16_t> random_tokens(std::mt19937_64& rng, int64_t tokens, int64_t d) const;
};

/// "dtype=bf16 h_q=.. d_qk=.. d_vh=.. causal=.. seed=.. lens=(lq,lk)..." for SCOPED_TRACE.
std::string describe(const PrefillCaseConfig& cfg);

}  // namespace mlakit::test
