// DeepSeek's YaRN RoPE helpers (docs/spec.md section 7), computed in double and stored as float32.

#include <algorithm>
#include <cmath>
#include <numbers>

#include "mlakit/rope.h"

namespace mlakit {
namespace {

/// Coefficient of ln(factor) in mscale: 0.1 * m * ln(factor) + 1.
constexpr double kMscaleSlope = 0.1;
/// Width given to the ramp when low == high, so (i - low) / (high - low) stays finite.
constexpr double kMinRampWidth = 0.001;

/// Dimension index (in [0, d_r)) whose wavelength spans `num_rotations` turns over orig_max_pos tokens.
double correction_dim(const YarnConfig& cfg, double num_rotations) {
  return cfg.d_r * std::log(double(cfg.orig_max_pos) / (num_rotations * 2.0 * std::numbers::pi)) /
         (2.0 * std::log(cfg.base));
}

}  // namespace

double yarn_mscale(double factor, double mscale) {
  if (factor <= 1.0) return 1.0;
  return kMscaleSlope * mscale * std::log(factor) + 1.0;
}

std::vector<double> yarn_inv_freq(const YarnConfig& cfg) {
  if (cfg.d_r <= 0 || cfg.d_r % 2 != 0) return {};
  const int half = cfg.d_r / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  const double low = std::max(std::floor(correction_dim(cfg, cfg.beta_fast)), 0.0);
  double high = std::min(std::ceil(correction_dim(cfg, cfg.beta_slow)), double(cfg.d_r - 1));
  if (high == low) high = low + kMinRampWidth;
  for (int i = 0; i < half; ++i) {
    const double theta = std::pow(cfg.base, -2.0 * i / cfg.d_r);
    if (cfg.factor <= 1.0) {  // no scaling
      inv_freq[size_t(i)] = theta;
      continue;
    }
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    inv_freq[size_t(i)] = theta * (1.0 - ramp) + (theta / cfg.factor) * ramp;
  }
  return inv_freq;
}

std::vector<float> yarn_cos_sin_table(const YarnConfig& cfg, int64_t max_pos) {
  const std::vector<double> inv_freq = yarn_inv_freq(cfg);
  if (inv_freq.empty() || max_pos <= 0) return {};
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  const int64_t d_r = 2 * half;
  const double attn_scale = yarn_mscale(cfg.factor, cfg.mscale) / yarn_mscale(cfg.factor, cfg.mscale_all_dim);
  std::vector<float> table(static_cast<size_t>(max_pos * d_r));
  for (int64_t pos = 0; pos < max_pos; ++pos) {
    float* row = table.data() + pos * d_r;
    for (int64_t i = 0; i < half; ++i) {
      const double phi = double(pos) * inv_freq[size_t(i)];
      row[i] = static_cast<float>(std::cos(phi) * attn_scale);
      row[half + i] = static_cast<float>(std::sin(phi) * attn_scale);
    }
  }
  return table;
}

double yarn_softmax_scale(const YarnConfig& cfg, int d_nope) {
  const double m = yarn_mscale(cfg.factor, cfg.mscale_all_dim);
  return m * m / std::sqrt(double(d_nope + cfg.d_r));
}

}  // namespace mlakit
