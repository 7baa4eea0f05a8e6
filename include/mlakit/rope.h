#pragma once
/// @file rope.h
/// Host helpers for RoPE tables and the softmax scale (docs/spec.md section 7): DeepSeek's YaRN variant.

#include <cstdint>
#include <vector>

namespace mlakit {

/// YaRN RoPE configuration as found in a DeepSeek config.json (`rope_scaling`). Defaults: DeepSeek-V3.
struct YarnConfig {
  int d_r = 64;                 ///< qk_rope_head_dim
  double base = 10000.0;        ///< rope_theta
  double factor = 40.0;         ///< rope_scaling.factor (<= 1 means no scaling)
  int64_t orig_max_pos = 4096;  ///< original_max_position_embeddings
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double mscale = 1.0;
  double mscale_all_dim = 1.0;
};

/// `0.1 * m * ln(factor) + 1`, or 1 when factor <= 1.
double yarn_mscale(double factor, double mscale);

/// theta'_i for i in [0, d_r/2): fast dimensions keep their frequency, slow ones are divided by factor.
std::vector<double> yarn_inv_freq(const YarnConfig& cfg);

/// float32 [max_pos, d_r]: row p is [cos(p * theta'_i) ... | sin(p * theta'_i) ...] * attention scale
/// `mscale(factor, mscale) / mscale(factor, mscale_all_dim)`.
std::vector<float> yarn_cos_sin_table(const YarnConfig& cfg, int64_t max_pos);

/// tau = mscale(factor, mscale_all_dim)^2 / sqrt(d_nope + d_r). DeepSeek-V3: 0.13523378.
double yarn_softmax_scale(const YarnConfig& cfg, int d_nope = 128);

}  // namespace mlakit
