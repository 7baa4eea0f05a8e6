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
  for (int d = 0; d < 3; ++d) MLAKIT_TRY(check::dim(out, "out", d, q.shape[d], "q.shape[" + std::to_string(d) + "]"));
  MLAKIT_TRY(check::dim(out, "out", 3, kv.dims.d_v(), "d_v = d_c"));

  MLAKIT_TRY(check::optional_tensor(lse, "lse", {DType::kFP32}, 3, kLseLayout));
  MLAKIT_TRY(check::same_device(lse, "lse", dev, "q"));
  if (lse.defined()) {
    for (int d = 0; d < 3; ++d) MLAKIT_TRY(check::dim(lse, "lse", d, q.shape[d], "q.shape[" + std::to_string(d) + "]"));
  }
  return check::positive_finite("softmax_scale", softmax_scale, "there is no default: pass tau explicitly");
}

/// The fp8_e4m3 scale the kernels read through kv.kv_scale (other formats never read it).
check::Operand kv_scale_operand(const KvCacheView& kv) {
  return check::scalar_operand(kv.format == KvFormat::kFP8E4M3 ? kv.kv_scale : nullptr, "kv.kv_scale", kv.pages.device);
}

}  // namespace

Status DecodeProblem::validate() const {
  MLAKIT_TRY(validate_decode_common(q, kv, out, lse, softmax_scale, check::PageRule::kPowerOfTwo));
  const int64_t b = batch();
  MLAKIT_TRY(check::tensor(block_table, "block_table", {DType::kInt32}, 2, "[b, max_pages]"));
  MLAKIT_TRY(check::same_device(block_table, "block_table", q.device, "q"));
  MLAKIT_TRY(check::dim(block_table, "block_table", 0, b, "b"));
  MLAKIT_TRY(check::range("block_table.shape[1]", block_table.shape[1], 1, INT32_MAX, "max_pages"));
  MLAKIT_TRY(check::tensor(seq_lens, "seq_lens", {DType::kInt32}, 1, "[b]"));
  MLAKIT_TRY(check::same_device(seq_lens, "seq_lens", q.device, "q"));
  MLAKIT_TRY(check::dim(seq_lens, "seq_lens", 0, b, "b"));
  MLAKIT_TRY(check::no_alias({check::operand(out, "out"), check::operand(lse, "lse")},
                             {check::operand(q, "q"), check::operand(kv.pages, "kv.pages"), kv_scale_operand(kv),
                              check::operand(block_table, "block_table"), check::operand(seq_lens, "seq_lens")}));
  if (q.device.is_cpu()) MLAKIT_TRY(check::block_table_contents(block_table, seq_lens, kv));
  return {};
}

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
  MLAKIT_TRY(check::no_alias({check::operand(out, "out"), check::operand(lse, "lse")},
                             {check::operand(q, "q"), check::operand(kv.pages, "kv.pages"), kv_scale_operand(kv),
                              check::operand(indices, "indices"), check::operand(topk_length, "topk_length"),
                              check::operand(attn_sink, "attn_sink")}));

  if (dev.is_cpu()) {
    const int64_t rows = kv.num_pages() * kv.page_size();
    for (int64_t bi = 0; bi < batch(); ++bi) {
      int64_t used = topk();  // columns >= topk_length[b] are ignored (docs/spec.md section 2): never checked
      if (topk_length.defined()) {
        used = topk_length.ptr<const int32_t>()[bi * topk_length.stride[0]];
        MLAKIT_TRY(check::range("topk_length[" + std::to_string(bi) + "]", used, 0, topk(), "topk"));
      }
      for (int64_t i = 0; i < s_q(); ++i) {
        const int32_t* row = indices.ptr<const int32_t>() + bi * indices.stride[0] + i * indices.stride[1];
        for (int64_t k = 0; k < used; ++k) {
          if (row[k] >= rows) {
            return check::fail("indices[" + std::to_string(bi) + "][" + std::to_string(i) + "][" + std::to_string(k) + "]",
                               int64_t(row[k]),
                               "must be < num_pages * page_size=" + std::to_string(rows) + " (negative means no key)");
          }
        }
      }
    }
  }
  return {};
}

}  // namespace mlakit
