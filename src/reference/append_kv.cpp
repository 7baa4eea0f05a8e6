// docs/spec.md section 7: write new tokens into the paged cache, with optional fused RoPE and fp8 q.
//
// Decision (fused == unfused): the rotated k_pe is rounded to k_pe's own dtype before it is encoded, exactly
// as if rope() had written it back and a plain append_kv had then read it. So "append with positions" gives
// the same bytes as "rope(k_pe), then append" for every format, and kernels have one definition to match.

#include <string>
#include <vector>

#include "reference/kv_rows.h"
#include "reference/ops.h"
#include "reference/rope_math.h"
#include "reference/tensor_access.h"

namespace mlakit::reference {
namespace {

/// The value `v` takes once stored in a tensor of dtype `t` (identity for float32).
float round_to_dtype(DType t, float v) {
  switch (t) {
    case DType::kBF16: return bf16_to_float(float_to_bf16(v));
    case DType::kFP16: return fp16_to_float(float_to_fp16(v));
    default: return v;
  }
}

/// Checks every slot and position before anything is written: a rejected call changes no byte.
Status check_indices(const AppendKvProblem& p) {
  const int64_t capacity = p.cache.num_pages() * p.cache.page_size();
  for (int64_t t = 0; t < p.num_tokens(); ++t) {
    const int64_t slot = load_int(p.slot_mapping, offset_of(p.slot_mapping, t));
    if (slot >= capacity)
      return Status::invalid("slot_mapping[" + std::to_string(t) + "]=" + std::to_string(slot) +
                             ": must be < num_pages * page_size = " + std::to_string(capacity) +
                             " (negative skips the token)");
  }
  if (!p.positions.defined()) return {};
  const int64_t max_pos = p.cos_sin.shape[0];
  for (int64_t t = 0; t < p.num_tokens(); ++t) {
    const int64_t pos = load_int(p.positions, offset_of(p.positions, t));
    if (pos < 0 || pos >= max_pos)
      return Status::invalid("positions[" + std::to_string(t) + "]=" + std::to_string(pos) +
                             ": must be in [0, max_pos=" + std::to_string(max_pos) + ") (rows of cos_sin)");
  }
  return {};
}

const float* cos_sin_row(const AppendKvProblem& p, int64_t t) {
  const int64_t pos = load_int(p.positions, offset_of(p.positions, t));
  return p.cos_sin.ptr<const float>() + offset_of(p.cos_sin, pos);
}

/// Rotates the last d_r columns of every head of q in place (fused RoPE on q_pe).
void rotate_q(const AppendKvProblem& p, int64_t d_r) {
  const int64_t h_q = p.q.shape[1];
  const int64_t rope_begin = p.q.shape[2] - d_r;
  std::vector<float> x(static_cast<size_t>(d_r));
  for (int64_t t = 0; t < p.num_tokens(); ++t) {
    const float* cs = cos_sin_row(p, t);
    for (int64_t h = 0; h < h_q; ++h) {
      for (int64_t i = 0; i < d_r; ++i) x[size_t(i)] = load_float(p.q, offset_of(p.q, t, h, rope_begin + i));
      rope_rotate(x.data(), d_r, cs, p.cos_sin.stride[1], p.rope_style);
      for (int64_t i = 0; i < d_r; ++i) store_float(p.q, offset_of(p.q, t, h, rope_begin + i), x[size_t(i)]);
    }
  }
}

/// q_fp8 = e4m3_satfinite(q / q_scale) over all columns, from q as stored (after its RoPE).
void quantise_q(const AppendKvProblem& p) {
  const float q_scale = p.q_scale ? *p.q_scale : p.q_scale_value;
  for (int64_t t = 0; t < p.q.shape[0]; ++t)
    for (int64_t h = 0; h < p.q.shape[1]; ++h)
      for (int64_t i = 0; i < p.q.shape[2]; ++i) {
        const float v = load_float(p.q, offset_of(p.q, t, h, i));
        static_cast<uint8_t*>(p.q_fp8.data)[offset_of(p.q_fp8, t, h, i)] = float_to_e4m3(v / q_scale);
      }
}

}  // namespace

Status append_kv(const AppendKvProblem& p) {
  MLAKIT_TRY(check_indices(p));
  const int64_t d_c = p.cache.dims.d_c;
  const int64_t d_r = p.cache.dims.d_r;
  const int64_t page_size = p.cache.page_size();
  const bool fused_rope = p.positions.defined();

  // Sequential on purpose: duplicate slots then have a defined result (the last token wins).
  std::vector<float> row(static_cast<size_t>(d_c + d_r));
  for (int64_t t = 0; t < p.num_tokens(); ++t) {
    const int64_t slot = load_int(p.slot_mapping, offset_of(p.slot_mapping, t));
    if (slot < 0) continue;  // padding token
    for (int64_t i = 0; i < d_c; ++i) row[size_t(i)] = load_float(p.kv_c, offset_of(p.kv_c, t, i));
    float* k_pe = row.data() + d_c;
    for (int64_t i = 0; i < d_r; ++i) k_pe[i] = load_float(p.k_pe, offset_of(p.k_pe, t, i));
    if (fused_rope) {
      rope_rotate(k_pe, d_r, cos_sin_row(p, t), p.cos_sin.stride[1], p.rope_style);
      for (int64_t i = 0; i < d_r; ++i) k_pe[i] = round_to_dtype(p.k_pe.dtype, k_pe[i]);
    }
    encode_kv_token(p.cache, row.data(), slot / page_size, slot % page_size);
  }

  if (p.q.defined()) {
    if (fused_rope) rotate_q(p, d_r);
    if (p.q_fp8.defined()) quantise_q(p);
  }
  return {};
}

}  // namespace mlakit::reference
