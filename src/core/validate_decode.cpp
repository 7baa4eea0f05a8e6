// validate() of the decode problems (docs/spec.md sections 1, 2 and 9).

#include "core/check.h"

namespace mlakit {
namespace {

constexpr auto kQLayout = "[b, s_q, h_q, d_qk]";
constexpr auto kOutLayout = "[b, s_q, h_q, d_v]";
constexpr auto kLseLayout = "[b, s_q, h_q]";

/// What dense and sparse decode share: q, the cache, out, lse and tau.
Status validate_decode_common(const TensorView& q, const KvCacheView& kv, const TensorView& out,
                              const TensorView& lse, float softmax_scale, check::PageRule page_rule) {
  MLAKIT_TRY(check::tensor(q, "q", {DType::kBF16, DType::kFP16}, 4, kQLayout));
  const Device dev = q.device;
  MLAKIT_TRY(check::range("b", q.shape[0], 1, INT32_MAX, "q.shape[0]"));
  MLAKIT_TRY(check::range("s_q", q.shape[1], 1, kMaxQueryTokens, "q.shape[1]"));
  MLAKIT_TRY(check::range("h_q", q.shape[2], 1, kMaxHeads, "q.shape[2]"));
  MLAKIT_TRY(check::kv_cache(kv, "kv", dev, "q", page_rule));
  MLAKIT_TRY(check::dim(q, "q", 3, kv.dims.d_qk(), "d_qk = d_c + d_r"));

  MLAKIT_TRY(check::tensor(out, "out", {q.dtype}, 4, kOutLayout));
  MLAKIT_TRY(check::same_device(out, "out", dev, "q"));
  MLAKIT_TRY(check::leading_dims(out, "out", q, "q", 3));
  MLAKIT_TRY(check::dim(out, "out", 3, kv.dims.d_v(),
                        kv.dims.v_whole_row ? "d_v = d_c + d_r (kv.dims.v_whole_row)" : "d_v = d_c"));

  MLAKIT_TRY(check::optional_tensor(lse, "lse", {DType::kFP32}, 3, kLseLayout));
  MLAKIT_TRY(check::same_device(lse, "lse", dev, "q"));
  if (lse.defined()) {
    MLAKIT_TRY(check::leading_dims(lse, "lse", q, "q", 3));
  }
  return check::positive_finite("softmax_scale", softmax_scale, "there is no default: pass tau explicitly");
}

/// The fp8_e4m3 scale the kernels read through kv.kv_scale (other formats never read it).
check::Operand kv_scale_operand(const KvCacheView& kv, const char* name = "kv.kv_scale") {
  return check::scalar_operand(kv.format == KvFormat::kFP8E4M3 ? kv.kv_scale : nullptr, name, kv.pages.device);
}

/// Sparse decode: the ids of indices[b][i][0, used) (used = topk_length[b] when given) must be below rows, which
/// only a host caller can check before running (docs/spec.md section 2). `name` is "indices" or "extra_indices".
Status check_ids(const TensorView& indices, const TensorView& lengths, int64_t rows, const std::string& name,
                 const std::string& length_name, const std::string& topk_name) {
  const int64_t topk = indices.shape[2];
  for (int64_t bi = 0; bi < indices.shape[0]; ++bi) {
    int64_t used = topk;  // columns >= topk_length[b] are ignored (docs/spec.md section 2): never checked
    if (lengths.defined()) {
      used = lengths.ptr<const int32_t>()[bi * lengths.stride[0]];
      MLAKIT_TRY(check::range(length_name + "[" + std::to_string(bi) + "]", used, 0, topk, topk_name));
    }
    for (int64_t i = 0; i < indices.shape[1]; ++i) {
      const int32_t* row = indices.ptr<const int32_t>() + bi * indices.stride[0] + i * indices.stride[1];
      for (int64_t k = 0; k < used; ++k) {
        if (row[k] >= rows) {
          return check::fail(name + "[" + std::to_string(bi) + "][" + std::to_string(i) + "][" + std::to_string(k) + "]",
                             int64_t(row[k]),
                             "must be < num_pages * page_size=" + std::to_string(rows) + " (negative means no key)");
        }
      }
    }
  }
  return {};
}

}  // namespace

Status DecodeProblem::validate() const {
  // First: the shape checks below would otherwise ask for an out as wide as the whole row.
  if (kv.dims.v_whole_row) {
    return check::fail("kv.dims.v_whole_row", "true",
                       "dense decode takes V = the first d_c columns (V as the whole row is DeepSeek V4's sparse "
                       "attention, docs/spec.md section 2.1)");
  }
  MLAKIT_TRY(validate_decode_common(q, kv, out, lse, softmax_scale, check::PageRule::kPowerOfTwo));
  const int64_t b = batch();
  if (block_table_indptr.defined()) {
    // The flat form (FlashInfer's kv_indices / kv_indptr): one list of every request's pages.
    MLAKIT_TRY(check::tensor(block_table_indptr, "block_table_indptr", {DType::kInt32}, 1, "[b + 1]"));
    MLAKIT_TRY(check::same_device(block_table_indptr, "block_table_indptr", q.device, "q"));
    MLAKIT_TRY(check::dim(block_table_indptr, "block_table_indptr", 0, b + 1, "b + 1"));
    MLAKIT_TRY(check::tensor(block_table, "block_table", {DType::kInt32}, 1, "[n] (flat, with block_table_indptr)"));
    MLAKIT_TRY(check::range("block_table.shape[0]", block_table.shape[0], 0, INT32_MAX, "pages listed"));
  } else {
    MLAKIT_TRY(check::tensor(block_table, "block_table", {DType::kInt32}, 2, "[b, max_pages]"));
    MLAKIT_TRY(check::dim(block_table, "block_table", 0, b, "b"));
    MLAKIT_TRY(check::range("block_table.shape[1]", block_table.shape[1], 1, INT32_MAX, "max_pages"));
  }
  MLAKIT_TRY(check::same_device(block_table, "block_table", q.device, "q"));
  MLAKIT_TRY(check::tensor(seq_lens, "seq_lens", {DType::kInt32}, 1, "[b]"));
  MLAKIT_TRY(check::same_device(seq_lens, "seq_lens", q.device, "q"));
  MLAKIT_TRY(check::dim(seq_lens, "seq_lens", 0, b, "b"));
  MLAKIT_TRY(check::no_alias({check::operand(out, "out"), check::operand(lse, "lse")},
                             {check::operand(q, "q"), check::operand(kv.pages, "kv.pages"),
                              check::operand(kv.k_pe, "kv.k_pe"), kv_scale_operand(kv),
                              check::operand(block_table, "block_table"), check::operand(seq_lens, "seq_lens"),
                              check::operand(block_table_indptr, "block_table_indptr")}));
  MLAKIT_TRY(check::context_shard(shard, "shard"));
  if (q.device.is_cpu()) {
    MLAKIT_TRY(check::block_table_contents(block_table, seq_lens, kv, shard, block_table_indptr));
  }
  return {};
}

namespace {

/// The extra cache of sparse decode (docs/spec.md section 2): all three fields or none, the same format and dims as
/// kv, its own page size.
Status validate_extra(const SparseDecodeProblem& p, Device dev) {
  const KvCacheView& extra_kv = p.extra_kv;
  const KvCacheView& kv = p.kv;
  const TensorView& extra_indices = p.extra_indices;
  const TensorView& extra_topk_length = p.extra_topk_length;
  if (!p.has_extra()) {
    if (extra_kv.pages.defined()) return check::fail("extra_kv.pages", "given", "needs extra_indices");
    if (extra_kv.k_pe.defined()) return check::fail("extra_kv.k_pe", "given", "needs extra_indices");
    if (extra_topk_length.defined()) return check::fail("extra_topk_length", "given", "needs extra_indices");
    return {};
  }
  MLAKIT_TRY(check::kv_cache(extra_kv, "extra_kv", dev, "q", check::PageRule::kAny));
  if (extra_kv.format != kv.format) {
    return check::fail("extra_kv.format", kv_format_name(extra_kv.format),
                       std::string("must equal kv.format=") + kv_format_name(kv.format) + " (docs/spec.md section 2)");
  }
  if (!(extra_kv.dims == kv.dims)) {
    return check::fail("extra_kv.dims", "d_c=" + std::to_string(extra_kv.dims.d_c) + ", d_r=" +
                                            std::to_string(extra_kv.dims.d_r) +
                                            ", v_whole_row=" + (extra_kv.dims.v_whole_row ? "true" : "false"),
                       "must equal kv.dims (one geometry for both caches)");
  }
  MLAKIT_TRY(check::tensor(extra_indices, "extra_indices", {DType::kInt32}, 3, "[b, s_q, extra_topk]"));
  MLAKIT_TRY(check::same_device(extra_indices, "extra_indices", dev, "q"));
  MLAKIT_TRY(check::dim(extra_indices, "extra_indices", 0, p.batch(), "b"));
  MLAKIT_TRY(check::dim(extra_indices, "extra_indices", 1, p.s_q(), "s_q"));
  MLAKIT_TRY(check::range("extra_topk", extra_indices.shape[2], 1, INT32_MAX, "extra_indices.shape[2]"));
  MLAKIT_TRY(check::optional_tensor(extra_topk_length, "extra_topk_length", {DType::kInt32}, 1, "[b]"));
  MLAKIT_TRY(check::same_device(extra_topk_length, "extra_topk_length", dev, "q"));
  if (extra_topk_length.defined()) MLAKIT_TRY(check::dim(extra_topk_length, "extra_topk_length", 0, p.batch(), "b"));
  return {};
}

}  // namespace

Status SparseDecodeProblem::validate() const {
  MLAKIT_TRY(validate_decode_common(q, kv, out, lse, softmax_scale, check::PageRule::kAny));
  const Device dev = q.device;
  MLAKIT_TRY(check::tensor(indices, "indices", {DType::kInt32}, 3, "[b, s_q, topk]"));
  MLAKIT_TRY(check::same_device(indices, "indices", dev, "q"));
  MLAKIT_TRY(check::dim(indices, "indices", 0, batch(), "b"));
  MLAKIT_TRY(check::dim(indices, "indices", 1, s_q(), "s_q"));
  MLAKIT_TRY(check::range("topk", indices.shape[2], 1, INT32_MAX, "indices.shape[2]"));
  MLAKIT_TRY(check::optional_tensor(topk_length, "topk_length", {DType::kInt32}, 1, "[b]"));
  MLAKIT_TRY(check::same_device(topk_length, "topk_length", dev, "q"));
  if (topk_length.defined()) MLAKIT_TRY(check::dim(topk_length, "topk_length", 0, batch(), "b"));
  MLAKIT_TRY(check::optional_tensor(attn_sink, "attn_sink", {DType::kFP32}, 1, "[h_q]"));
  MLAKIT_TRY(check::same_device(attn_sink, "attn_sink", dev, "q"));
  if (attn_sink.defined()) MLAKIT_TRY(check::dim(attn_sink, "attn_sink", 0, h_q(), "h_q"));
  MLAKIT_TRY(validate_extra(*this, dev));
  MLAKIT_TRY(check::optional_tensor(max_logits, "max_logits", {DType::kFP32}, 3, kLseLayout));
  MLAKIT_TRY(check::same_device(max_logits, "max_logits", dev, "q"));
  if (max_logits.defined()) {
    MLAKIT_TRY(check::leading_dims(max_logits, "max_logits", q, "q", 3));
  }
  MLAKIT_TRY(check::no_alias({check::operand(out, "out"), check::operand(lse, "lse"),
                              check::operand(max_logits, "max_logits")},
                             {check::operand(q, "q"), check::operand(kv.pages, "kv.pages"),
                              check::operand(kv.k_pe, "kv.k_pe"), kv_scale_operand(kv),
                              check::operand(indices, "indices"), check::operand(topk_length, "topk_length"),
                              check::operand(attn_sink, "attn_sink"), check::operand(extra_kv.pages, "extra_kv.pages"),
                              check::operand(extra_kv.k_pe, "extra_kv.k_pe"),
                              kv_scale_operand(extra_kv, "extra_kv.kv_scale"),
                              check::operand(extra_indices, "extra_indices"),
                              check::operand(extra_topk_length, "extra_topk_length")}));
  if (dev.is_cpu()) {
    MLAKIT_TRY(check_ids(indices, topk_length, kv.num_pages() * kv.page_size(), "indices", "topk_length", "topk"));
    if (has_extra()) {
      MLAKIT_TRY(check_ids(extra_indices, extra_topk_length, extra_kv.num_pages() * extra_kv.page_size(),
                           "extra_indices", "extra_topk_length", "extra_topk"));
    }
  }
  return {};
}

}  // namespace mlakit
