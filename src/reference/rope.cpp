// docs/spec.md section 7: RoPE in place on x [T, H, d_r], one table row per token position.

#include <string>
#include <vector>

#include "reference/ops.h"
#include "reference/parallel.h"
#include "reference/rope_math.h"
#include "reference/tensor_access.h"

namespace mlakit::reference {

Status rope(const RopeProblem& p) {
  const int64_t num_tokens = p.x.shape[0];
  const int64_t num_heads = p.x.shape[1];
  const int64_t d_r = p.x.shape[2];
  const int64_t max_pos = p.cos_sin.shape[0];

  // Every position is checked before anything is rotated, so a bad call leaves x untouched.
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int64_t pos = load_int(p.positions, offset_of(p.positions, t));
    if (pos < 0 || pos >= max_pos)
      return Status::invalid("positions[" + std::to_string(t) + "]=" + std::to_string(pos) +
                             ": must be in [0, max_pos=" + std::to_string(max_pos) + ") (rows of cos_sin)");
  }

  parallel_for(num_tokens, [&](int64_t t) {
    const int64_t pos = load_int(p.positions, offset_of(p.positions, t));
    const float* cs_row = p.cos_sin.ptr<const float>() + offset_of(p.cos_sin, pos);
    std::vector<float> x(static_cast<size_t>(d_r));
    for (int64_t h = 0; h < num_heads; ++h) {
      for (int64_t i = 0; i < d_r; ++i) x[size_t(i)] = load_float(p.x, offset_of(p.x, t, h, i));
      rope_rotate(x.data(), d_r, cs_row, p.cos_sin.stride[1], p.style);
      for (int64_t i = 0; i < d_r; ++i) store_float(p.x, offset_of(p.x, t, h, i), x[size_t(i)]);
    }
  });
  return {};
}

}  // namespace mlakit::reference
