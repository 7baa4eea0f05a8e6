#pragma once
/// @file problems.h
/// One plain description per operation of docs/spec.md sections 1-8. A problem holds non-owning views of
/// the caller's tensors plus the scalars of the call; `validate()` checks everything that can be checked
/// on the host without reading device memory and names field, value and rule on failure.
///
/// Conventions: shapes use the names of docs/spec.md section 0; strides are in elements; every tensor's last
/// dimension must be contiguous (stride 1). Optional tensors may be left default-constructed.

#include <cstdint>

#include "mlakit/context_shard.h"
#include "mlakit/kv_format.h"
#include "mlakit/status.h"
#include "mlakit/types.h"

namespace mlakit {

/// Latent geometry (docs/spec.md section 0). DeepSeek-V2/V3/V3.2 and Kimi K2 use 512/64.
struct MlaDims {
  int d_c = kDefaultDimC;  ///< latent width (kv_lora_rank); also d_v unless v_whole_row
  int d_r = kDefaultDimR;  ///< RoPE width (qk_rope_head_dim)
  /// DeepSeek V4 (docs/spec.md section 2.1): V is the whole row, RoPE part included, so d_v = d_qk. Sparse
  /// attention only; dense decode rejects it.
  bool v_whole_row = false;
  constexpr int d_qk() const { return d_c + d_r; }
  constexpr int d_v() const { return v_whole_row ? d_c + d_r : d_c; }
  /// DeepSeek V4's geometry: d_c = 448, d_r = 64, d_qk = d_v = 512.
  static constexpr MlaDims deepseek_v4() { return MlaDims{448, 64, true}; }
  friend bool operator==(const MlaDims&, const MlaDims&) = default;
};

/// A paged latent KV cache (docs/spec.md section 4).
struct KvCacheView {
  /// uint8 [num_pages, page_size, row_bytes]: stride[0] is the page stride and stride[1] the row stride,
  /// both in bytes; stride[2] must be 1. row_bytes = kv_row_bytes(format, dims.d_c, dims.d_r).
  TensorView pages;
  KvFormat format = KvFormat::kBF16;
  MlaDims dims{};
  /// fp8_e4m3 only: float32 scalar on the cache's device, read at run time (so a captured CUDA graph
  /// replays with a new scale). When null, `kv_scale_value` is used.
  const float* kv_scale = nullptr;
  float kv_scale_value = 1.0f;
  /// The split form (docs/spec.md section 4; FlashInfer's ckv_cache / kpe_cache): when given, `pages` holds only the
  /// kv_c columns of each row, uint8 [num_pages, page_size, d_c * e], and this view the k_pe columns, uint8
  /// [num_pages, page_size, d_r * e], each with its own strides in bytes (e = kv_element_bytes(format): element
  /// formats only). Token t of page n is then row t of page n in both.
  TensorView k_pe;

  int64_t num_pages() const { return pages.shape[0]; }
  int64_t page_size() const { return pages.shape[1]; }
  bool split() const { return k_pe.defined(); }
  /// Bytes of one whole row in `format` (both parts of a split row).
  int64_t row_bytes() const { return kv_row_bytes(format, dims.d_c, dims.d_r); }
  /// Bytes of one row of `pages`: the whole row, or kv_c's d_c values when split.
  int64_t pages_row_bytes() const { return split() ? kv_element_bytes(format) * dims.d_c : row_bytes(); }
  /// Bytes of one row of `k_pe` (split form only): d_r values.
  int64_t k_pe_row_bytes() const { return kv_element_bytes(format) * dims.d_r; }
  /// Builds a view over a contiguous cache of `num_pages` pages (fp8_ds_v4: pages padded to a multiple of 576
  /// bytes, ds_v4::packed_page_bytes, as FlashMLA lays them out).
  static KvCacheView contiguous(const void* data, KvFormat format, int64_t num_pages, int64_t page_size,
                                MlaDims dims = {}, Device device = Device::cpu());
};

/// Smallest and largest page size any backend may accept (docs/spec.md section 9).
inline constexpr int64_t kMinPageSize = 1;
inline constexpr int64_t kMaxPageSize = 256;
/// Query heads per call (docs/spec.md section 0: 128, 64, ..., any 1..128 after tensor parallelism).
inline constexpr int64_t kMaxHeads = 128;
/// Query tokens per request in decode (1, or 2..8 for speculative decoding / MTP).
inline constexpr int64_t kMaxQueryTokens = 8;

/// docs/spec.md section 1: dense decode in the absorbed form, with split-KV planned on the device.
struct DecodeProblem {
  TensorView q;            ///< bf16|fp16 [b, s_q, h_q, d_qk]
  KvCacheView kv;          ///< paged cache
  TensorView block_table;  ///< int32 [b, max_pages] (or flat [n], below); entries past ceil(L_b' / P) are never read
  TensorView seq_lens;     ///< int32 [b], L_b >= 0 including the s_q new tokens
  /// Optional int32 [b + 1] (FlashInfer's kv_indptr): the page lists of all requests in one flat block_table,
  /// int32 [n]; request b's pages are block_table[block_table_indptr[b] + k], k < ceil(L_b' / P), and must lie
  /// below block_table_indptr[b + 1] (docs/spec.md section 1).
  TensorView block_table_indptr;
  TensorView out;          ///< dtype of q [b, s_q, h_q, d_v]
  TensorView lse;          ///< optional float32 [b, s_q, h_q], natural log, -inf for empty rows
  float softmax_scale = 0.0f;  ///< tau; required, there is no default
  bool causal = false;         ///< query row i sees keys j <= L_b - s_q + i
  /// Context parallelism (docs/spec.md section 11). When shard.world > 1, seq_lens still hold the global L_b,
  /// while kv and block_table hold only this rank's tokens (local token k of request b is row k % P of page
  /// block_table[b][k / P]); the call attends over them: L_b' = shard.owned_before(L_b) keys, and under the
  /// causal rule query row i sees the owned tokens among the global tokens [0, L_b - s_q + i]. Merging the
  /// ranks' (out, lse) by section 6 gives the unsharded result.
  ContextShard shard{};

  int64_t batch() const { return q.shape[0]; }
  int64_t s_q() const { return q.shape[1]; }
  int64_t h_q() const { return q.shape[2]; }
  Device device() const { return q.device; }
  Status validate() const;
};

/// docs/spec.md section 2: sparse (top-k) decode over global row ids.
struct SparseDecodeProblem {
  TensorView q;            ///< bf16|fp16 [b, s_q, h_q, d_qk]
  KvCacheView kv;          ///< paged cache; rows addressed as page * P + offset
  TensorView indices;      ///< int32 [b, s_q, topk]; negative = no key
  TensorView topk_length;  ///< optional int32 [b]; columns >= topk_length[b] ignored
  TensorView attn_sink;    ///< optional float32 [h_q]
  TensorView out;          ///< dtype of q [b, s_q, h_q, d_v]
  TensorView lse;          ///< optional float32 [b, s_q, h_q]
  float softmax_scale = 0.0f;
  /// Optional extra cache (DeepSeek V4, docs/spec.md section 2): same format and dims as `kv`, its own page
  /// size; its valid ids join those of `indices` in one softmax. Present when extra_indices is defined.
  KvCacheView extra_kv;
  TensorView extra_indices;      ///< int32 [b, s_q, extra_topk]; negative = no key
  TensorView extra_topk_length;  ///< optional int32 [b]; columns >= extra_topk_length[b] ignored
  /// Optional float32 [b, s_q, h_q]: the largest logit tau * <q, K_j> over the row's valid keys (both sets), -inf
  /// for a row with none (FlashMLA's sparse prefill returns it).
  TensorView max_logits;

  int64_t batch() const { return q.shape[0]; }
  int64_t s_q() const { return q.shape[1]; }
  int64_t h_q() const { return q.shape[2]; }
  int64_t topk() const { return indices.shape[2]; }
  bool has_extra() const { return extra_indices.defined(); }
  int64_t extra_topk() const { return has_extra() ? extra_indices.shape[2] : 0; }
  Device device() const { return q.device; }
  Status validate() const;
};

/// docs/spec.md section 3: ragged prefill in the non-absorbed (MHA 192/128) form.
struct PrefillProblem {
  TensorView q;             ///< bf16|fp16 [T_q, h_q, d_nope + d_r]
  TensorView k;             ///< dtype of q [T_k, h_q, d_nope + d_r]
  TensorView v;             ///< dtype of q [T_k, h_q, d_vh]
  TensorView cu_seqlens_q;  ///< int32 [b + 1], prefix sums of Lq_b
  TensorView cu_seqlens_k;  ///< int32 [b + 1], prefix sums of Lk_b (Lk_b >= Lq_b)
  TensorView out;           ///< dtype of q [T_q, h_q, d_vh]
  TensorView lse;           ///< optional float32 [T_q, h_q]
  float softmax_scale = 0.0f;
  bool causal = false;      ///< bottom-right aligned: query i sees keys j <= i + Lk_b - Lq_b

  int64_t batch() const { return cu_seqlens_q.shape[0] - 1; }
  int64_t h_q() const { return q.shape[1]; }
  Device device() const { return q.device; }
  Status validate() const;
};

/// docs/spec.md section 6, N-input form: merges n partial states over disjoint key sets.
/// In place when `out`/`lse` alias part 0 of `parts_out`/`parts_lse` exactly: same pointer, dtype, shape and
/// strides (the leading dimension dropped). Any other overlap of an output with an input is rejected.
struct MergeProblem {
  TensorView parts_out;  ///< float32|bf16|fp16 [n, rows, d], each normalised within its part
  TensorView parts_lse;  ///< float32 [n, rows]
  TensorView out;        ///< float32|bf16|fp16 [rows, d]
  TensorView lse;        ///< optional float32 [rows]
  Device device() const { return parts_out.device; }
  Status validate() const;
};

/// docs/spec.md section 6, two-input form. In place when `out`/`lse` alias `out_a`/`lse_a` (or `out_b`/`lse_b`)
/// exactly: same pointer, dtype, shape and strides. Any other overlap of an output with an input is rejected.
struct MergePairProblem {
  TensorView out_a;  ///< float32|bf16|fp16 [rows, d]
  TensorView lse_a;  ///< float32 [rows]
  TensorView out_b;  ///< same dtype and shape as out_a
  TensorView lse_b;  ///< float32 [rows]
  TensorView out;    ///< float32|bf16|fp16 [rows, d]
  TensorView lse;    ///< optional float32 [rows]
  Device device() const { return out_a.device; }
  Status validate() const;
};

/// RoPE pairing (docs/spec.md section 7).
enum class RopeStyle : uint8_t {
  kInterleaved,  ///< pairs (2i, 2i+1): DeepSeek
  kNeox,         ///< pairs (i, i + d_r/2)
};
const char* rope_style_name(RopeStyle s);

/// docs/spec.md section 7: RoPE applied in place.
struct RopeProblem {
  TensorView x;          ///< bf16|fp16|float32 [T, H, d_r], rotated in place (e.g. q's last d_r columns)
  TensorView positions;  ///< int64 [T]
  TensorView cos_sin;    ///< float32 [max_pos, d_r]: [cos(pos * theta'_0..) | sin(same)]
  RopeStyle style = RopeStyle::kInterleaved;
  Device device() const { return x.device; }
  Status validate() const;
};

/// docs/spec.md section 7: write new tokens into the paged cache, optionally with fused RoPE.
struct AppendKvProblem {
  TensorView kv_c;          ///< bf16|fp16|float32 [T, d_c]
  TensorView k_pe;          ///< dtype of kv_c [T, d_r]
  TensorView slot_mapping;  ///< int64 [T]; row slot % P of page slot / P; negative = skip
  KvCacheView cache;        ///< written in place

  // Fused RoPE: when `positions` is given, k_pe is rotated before it is written (k_pe itself is not
  // modified) and, when `q` is given, q's last d_r columns are rotated in place.
  TensorView positions;     ///< optional int64 [T]
  TensorView cos_sin;       ///< float32 [max_pos, d_r]; required with positions
  RopeStyle rope_style = RopeStyle::kInterleaved;
  TensorView q;             ///< optional bf16|fp16 [T, h_q, d_qk]
  /// Optional e4m3 [T, h_q, d_qk]: q (after RoPE) / q_scale, saturating. Needs q.
  TensorView q_fp8;
  const float* q_scale = nullptr;  ///< device scalar; when null `q_scale_value` is used
  float q_scale_value = 1.0f;

  int64_t num_tokens() const { return kv_c.shape[0]; }
  Device device() const { return kv_c.device; }
  Status validate() const;
};

/// docs/spec.md section 8: dequantised rows of every request, concatenated.
struct GatherKvProblem {
  KvCacheView cache;
  TensorView block_table;  ///< int32 [b, max_pages]
  TensorView seq_lens;     ///< int32 [b]
  TensorView cu_out;       ///< int32 [b + 1], prefix sums of seq_lens (caller computed)
  TensorView out;          ///< bf16 [total_rows, d_qk], total_rows >= sum L_b
  int64_t batch() const { return seq_lens.shape[0]; }
  Device device() const { return out.device; }
  Status validate() const;
};

}  // namespace mlakit
