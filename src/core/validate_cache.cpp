// validate() of the cache operations: RoPE, append_kv (docs/spec.md section 7) and gather_kv (section 8).

#include "core/check.h"

namespace mlakit {
namespace {

constexpr std::initializer_list<DType> kInputDTypes = {DType::kBF16, DType::kFP16, DType::kFP32};

/// The cos/sin table and positions of RoPE: table float32 [max_pos, d_r] contiguous, positions int64 [T].
Status rope_inputs(const TensorView& positions, const TensorView& cos_sin, int64_t tokens, int64_t d_r,
                   Device dev, std::string_view anchor) {
  MLAKIT_TRY(check::tensor(positions, "positions", {DType::kInt64}, 1, "[T]"));
  MLAKIT_TRY(check::dim(positions, "positions", 0, tokens, "T"));
  MLAKIT_TRY(check::same_device(positions, "positions", dev, anchor));
  MLAKIT_TRY(check::tensor(cos_sin, "cos_sin", {DType::kFP32}, 2, "[max_pos, d_r]"));
  MLAKIT_TRY(check::dim(cos_sin, "cos_sin", 1, d_r, "d_r"));
  MLAKIT_TRY(check::range("cos_sin.shape[0]", cos_sin.shape[0], 1, INT64_MAX, "max_pos"));
  MLAKIT_TRY(check::same_device(cos_sin, "cos_sin", dev, anchor));
  if (!cos_sin.is_contiguous()) return check::fail("cos_sin.stride[0]", cos_sin.stride[0], "must be d_r (contiguous)");
  return {};
}

/// Positions within the table, when they can be read on the host.
Status positions_contents(const TensorView& positions, const TensorView& cos_sin) {
  if (!positions.device.is_cpu()) return {};
  for (int64_t t = 0; t < positions.shape[0]; ++t) {
    const int64_t pos = positions.ptr<const int64_t>()[t * positions.stride[0]];
    if (pos >= 0 && pos < cos_sin.shape[0]) continue;  // the message is built for a failure only
    return check::range("positions[" + std::to_string(t) + "]", pos, 0, cos_sin.shape[0] - 1, "rows of cos_sin");
  }
  return {};
}

Status known_rope_style(RopeStyle style, std::string_view name) {
  if (style == RopeStyle::kInterleaved || style == RopeStyle::kNeox) return {};
  return check::fail(name, int64_t(style), "must be interleaved (0) or neox (1)");
}

/// The fp8_e4m3 scale the kernels read through cache.kv_scale (other formats never read it).
check::Operand kv_scale_operand(const KvCacheView& cache) {
  return check::scalar_operand(cache.format == KvFormat::kFP8E4M3 ? cache.kv_scale : nullptr, "cache.kv_scale",
                               cache.pages.device);
}

}  // namespace

Status RopeProblem::validate() const {
  MLAKIT_TRY(check::tensor(x, "x", kInputDTypes, 3, "[T, H, d_r]"));
  MLAKIT_TRY(check::range("d_r", x.shape[2], 2, INT32_MAX, "x.shape[2]"));
  if (x.shape[2] % 2 != 0) return check::fail("d_r", x.shape[2], "must be even (RoPE rotates pairs)");
  MLAKIT_TRY(known_rope_style(style, "style"));
  MLAKIT_TRY(rope_inputs(positions, cos_sin, x.shape[0], x.shape[2], x.device, "x"));
  // x is rotated in place: it is the one tensor both read and written.
  MLAKIT_TRY(check::no_alias({check::operand(x, "x")},
                             {check::operand(positions, "positions"), check::operand(cos_sin, "cos_sin")}));
  return positions_contents(positions, cos_sin);
}

Status AppendKvProblem::validate() const {
  MLAKIT_TRY(check::tensor(kv_c, "kv_c", kInputDTypes, 2, "[T, d_c]"));
  const Device dev = kv_c.device;
  const int64_t tokens = kv_c.shape[0];
  MLAKIT_TRY(check::kv_cache(cache, "cache", dev, "kv_c", check::PageRule::kAny));  // rows found by slot alone
  const MlaDims& d = cache.dims;
  MLAKIT_TRY(check::dim(kv_c, "kv_c", 1, d.d_c, "d_c"));
  MLAKIT_TRY(check::tensor(k_pe, "k_pe", {kv_c.dtype}, 2, "[T, d_r]"));
  MLAKIT_TRY(check::dim(k_pe, "k_pe", 0, tokens, "T"));
  MLAKIT_TRY(check::dim(k_pe, "k_pe", 1, d.d_r, "d_r"));
  MLAKIT_TRY(check::same_device(k_pe, "k_pe", dev, "kv_c"));
  MLAKIT_TRY(check::tensor(slot_mapping, "slot_mapping", {DType::kInt64}, 1, "[T]"));
  MLAKIT_TRY(check::dim(slot_mapping, "slot_mapping", 0, tokens, "T"));
  MLAKIT_TRY(check::same_device(slot_mapping, "slot_mapping", dev, "kv_c"));

  if (positions.defined()) {
    MLAKIT_TRY(rope_inputs(positions, cos_sin, tokens, d.d_r, dev, "kv_c"));
    MLAKIT_TRY(known_rope_style(rope_style, "rope_style"));
  }
  MLAKIT_TRY(check::optional_tensor(q, "q", {DType::kBF16, DType::kFP16}, 3, "[T, h_q, d_qk]"));
  if (q.defined()) {
    MLAKIT_TRY(check::same_device(q, "q", dev, "kv_c"));
    MLAKIT_TRY(check::dim(q, "q", 0, tokens, "T"));
    MLAKIT_TRY(check::range("h_q", q.shape[1], 1, kMaxHeads, "q.shape[1]"));
    MLAKIT_TRY(check::dim(q, "q", 2, d.d_qk(), "d_qk = d_c + d_r"));
  }
  MLAKIT_TRY(check::optional_tensor(q_fp8, "q_fp8", {DType::kFP8E4M3}, 3, "[T, h_q, d_qk]"));
  if (q_fp8.defined()) {
    if (!q.defined()) return check::fail("q", "missing", "is required when q_fp8 is given");
    MLAKIT_TRY(check::same_device(q_fp8, "q_fp8", dev, "kv_c"));
    MLAKIT_TRY(check::leading_dims(q_fp8, "q_fp8", q, "q", 3));
    if (q_scale == nullptr) MLAKIT_TRY(check::positive_finite("q_scale_value", q_scale_value, "used when q_scale is null"));
  }
  // Written: the cache, q when fused RoPE rotates it in place, q_fp8. q is otherwise only read (for q_fp8).
  const bool q_written = q.defined() && positions.defined();
  const check::Operand q_op = check::operand(q, "q"), none{};
  // A split cache cut from one [..., d_c + d_r] array: its parts' spans overlap, their bytes do not. Each part is
  // then checked against everything but the other part.
  const bool columns = cache.split() && check::column_slices(cache.pages, cache.pages_row_bytes(), cache.k_pe,
                                                              cache.k_pe_row_bytes());
  const check::Operand pages_op = check::operand(cache.pages, "cache.pages");
  const check::Operand k_pe_op = check::operand(cache.k_pe, "cache.k_pe");
  for (int pass = 0; pass < (columns ? 2 : 1); ++pass) {  // columns: pass 0 without k_pe, pass 1 without pages
    MLAKIT_TRY(check::no_alias(
        {columns && pass == 1 ? none : pages_op, columns && pass == 0 ? none : k_pe_op, q_written ? q_op : none,
         check::operand(q_fp8, "q_fp8")},
        {check::operand(kv_c, "kv_c"), check::operand(k_pe, "k_pe"), check::operand(slot_mapping, "slot_mapping"),
         check::operand(positions, "positions"), positions.defined() ? check::operand(cos_sin, "cos_sin") : none,
         q_written ? none : q_op,
         check::scalar_operand(q_fp8.defined() ? q_scale : nullptr, "q_scale", dev), kv_scale_operand(cache)}));
  }
  if (positions.defined()) MLAKIT_TRY(positions_contents(positions, cos_sin));

  if (dev.is_cpu()) {
    const int64_t rows = cache.num_pages() * cache.page_size();
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t slot = slot_mapping.ptr<const int64_t>()[t * slot_mapping.stride[0]];
      if (slot >= rows) {
        return check::fail("slot_mapping[" + std::to_string(t) + "]", slot,
                           "must be < num_pages * page_size=" + std::to_string(rows) + " (negative skips the token)");
      }
    }
  }
  return {};
}

Status GatherKvProblem::validate() const {
  MLAKIT_TRY(check::tensor(out, "out", {DType::kBF16}, 2, "[total_rows, d_qk]"));
  const Device dev = out.device;
  MLAKIT_TRY(check::kv_cache(cache, "cache", dev, "out", check::PageRule::kAny));
  MLAKIT_TRY(check::dim(out, "out", 1, cache.dims.d_qk(), "d_qk"));
  MLAKIT_TRY(check::tensor(seq_lens, "seq_lens", {DType::kInt32}, 1, "[b]"));
  MLAKIT_TRY(check::range("b", seq_lens.shape[0], 1, INT32_MAX, "seq_lens.shape[0]"));
  MLAKIT_TRY(check::tensor(block_table, "block_table", {DType::kInt32}, 2, "[b, max_pages]"));
  MLAKIT_TRY(check::dim(block_table, "block_table", 0, batch(), "b"));
  MLAKIT_TRY(check::range("block_table.shape[1]", block_table.shape[1], 1, INT32_MAX, "max_pages"));
  MLAKIT_TRY(check::tensor(cu_out, "cu_out", {DType::kInt32}, 1, "[b + 1]"));
  MLAKIT_TRY(check::dim(cu_out, "cu_out", 0, batch() + 1, "b + 1"));
  for (const auto& [t, name] : {std::pair{&seq_lens, "seq_lens"}, {&block_table, "block_table"}, {&cu_out, "cu_out"}}) {
    MLAKIT_TRY(check::same_device(*t, name, dev, "out"));
  }
  MLAKIT_TRY(check::no_alias({check::operand(out, "out")},
                             {check::operand(cache.pages, "cache.pages"), check::operand(cache.k_pe, "cache.k_pe"),
                              kv_scale_operand(cache),
                              check::operand(block_table, "block_table"), check::operand(seq_lens, "seq_lens"),
                              check::operand(cu_out, "cu_out")}));
  if (dev.is_cpu()) {
    MLAKIT_TRY(check::block_table_contents(block_table, seq_lens, cache));
    const auto cu = [&](int64_t i) { return int64_t(cu_out.ptr<const int32_t>()[i * cu_out.stride[0]]); };
    MLAKIT_TRY(check::range("cu_out[0]", cu(0), 0, 0, "prefix sums start at 0"));
    for (int64_t i = 0; i < batch(); ++i) {
      const int64_t expected = cu(i) + seq_lens.ptr<const int32_t>()[i * seq_lens.stride[0]];
      MLAKIT_TRY(check::range("cu_out[" + std::to_string(i + 1) + "]", cu(i + 1), expected, expected,
                              "must equal cu_out[" + std::to_string(i) + "] + seq_lens[" + std::to_string(i) + "]"));
    }
    MLAKIT_TRY(check::range("cu_out[" + std::to_string(batch()) + "]", cu(batch()), 0, out.shape[0],
                            "total rows must fit in out.shape[0]"));
  }
  return {};
}

}  // namespace mlakit
