// Host helpers of docs/spec.md section 7 (DeepSeek's YaRN RoPE table and softmax scale) and build facts.

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <memory>
#include <vector>

#include "ops.h"

namespace mlakit::py {
namespace {

using nb::arg;

YarnConfig make_config(int d_r, double base, double factor, int64_t orig_max_pos, double beta_fast,
                       double beta_slow, double mscale, double mscale_all_dim) {
  return YarnConfig{d_r, base, factor, orig_max_pos, beta_fast, beta_slow, mscale, mscale_all_dim};
}

// Returns the table as a numpy float32 [max_pos, d_r] array owning its memory.
nb::ndarray<nb::numpy, float, nb::ndim<2>> cos_sin_table(int64_t max_pos, int d_r, double base, double factor,
                                                         int64_t orig_max_pos, double beta_fast, double beta_slow,
                                                         double mscale, double mscale_all_dim) {
  if (max_pos < 0 || d_r < 0 || d_r % 2 != 0) {
    throw nb::value_error(("max_pos=" + std::to_string(max_pos) + ", d_r=" + std::to_string(d_r) +
                           ": max_pos must be >= 0 and d_r even and >= 0").c_str());
  }
  auto table = std::make_unique<std::vector<float>>(
      yarn_cos_sin_table(make_config(d_r, base, factor, orig_max_pos, beta_fast, beta_slow, mscale, mscale_all_dim),
                         max_pos));
  float* data = table->data();
  nb::capsule owner(table.get(), [](void* p) noexcept { delete static_cast<std::vector<float>*>(p); });
  table.release();
  return nb::ndarray<nb::numpy, float, nb::ndim<2>>(data, {size_t(max_pos), size_t(d_r)}, owner);
}

}  // namespace

void bind_helpers(nb::module_& m) {
  // Defaults are DeepSeek-V3's (rope.h YarnConfig); names follow config.json's rope_scaling.
  m.def("yarn_cos_sin_table", &cos_sin_table, arg("max_pos"), nb::kw_only(), arg("d_r") = 64,
        arg("base") = 10000.0, arg("factor") = 40.0, arg("orig_max_pos") = 4096, arg("beta_fast") = 32.0,
        arg("beta_slow") = 1.0, arg("mscale") = 1.0, arg("mscale_all_dim") = 1.0,
        "float32 [max_pos, d_r] numpy array: row p = [cos(p*theta'_i) | sin(p*theta'_i)] * mscale ratio "
        "(docs/spec.md section 7). Copy it to the device for CUDA backends.");
  m.def(
      "yarn_softmax_scale",
      [](int d_nope, int d_r, double factor, double mscale_all_dim) {
        YarnConfig cfg;
        cfg.d_r = d_r;
        cfg.factor = factor;
        cfg.mscale_all_dim = mscale_all_dim;
        return yarn_softmax_scale(cfg, d_nope);
      },
      nb::kw_only(), arg("d_nope") = 128, arg("d_r") = 64, arg("factor") = 40.0, arg("mscale_all_dim") = 1.0,
      "tau = mscale(factor, mscale_all_dim)^2 / sqrt(d_nope + d_r); DeepSeek-V3: 0.13523378.");
  m.def("yarn_mscale", &yarn_mscale, arg("factor"), arg("mscale"), "0.1 * mscale * ln(factor) + 1 (1 when factor <= 1).");
  m.def(
      "yarn_inv_freq",
      [](int d_r, double base, double factor, int64_t orig_max_pos, double beta_fast, double beta_slow) {
        return yarn_inv_freq(make_config(d_r, base, factor, orig_max_pos, beta_fast, beta_slow, 1.0, 1.0));
      },
      nb::kw_only(), arg("d_r") = 64, arg("base") = 10000.0, arg("factor") = 40.0, arg("orig_max_pos") = 4096,
      arg("beta_fast") = 32.0, arg("beta_slow") = 1.0, "theta'_i for i in [0, d_r/2) (docs/spec.md section 7).");
  m.def("version", [] { return std::string(version()); }, "MLAKit version, e.g. '0.1.0'.");
  m.def("build_info", [] { return build_info(); }, "Build options, e.g. 'cuda=ON archs=80;90a'.");
}

}  // namespace mlakit::py
