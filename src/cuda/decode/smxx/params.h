#pragma once
// Plain parameter structs of the decode kernels and the layout of the caller's workspace, shared by every
// kernel family (sm80/, sm90/). Host code (smxx/host.cpp) fills them; device code only reads them. Strides are in elements unless named *_bytes.

#include <cstddef>
#include <cstdint>

#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/fast_div.h"

namespace mlakit::cuda::decode {

/// Start of one partition of the batch's KV work: request `req`, KV tile `tile` of that request.
/// Partition g covers [start[g], start[g + 1]) in (req, tile) order; start[G] = (b, 0).
struct PartitionStart {
  int32_t req;
  int32_t tile;
};

/// What the plan tells the combine about one request (written by the plan kernel, or by the decode CTA holding the
/// request's tile 0 when the CTAs plan themselves). Partial slots are per partition, so that no CTA needs a prefix
/// over other requests: partition g's first request (the one it starts in) writes its part to slot 2 g, its last
/// request, when that one goes on into the next partition, to slot 2 g + 1 (partition_slot in plan.cuh).
struct RequestPlan {
  int32_t first_partition;  // partition holding tile 0 of the request
  int32_t num_splits;       // partitions that share the request; 1 = written straight to out
  int32_t split_base;       // (num_splits > 1) the slot of its part in first_partition: 2 first_partition, + 1 when
                            // the partition started in an earlier request
  int32_t pad_;
};

/// Byte offsets inside the workspace. Sized from (b, rows per request, partitions), none of which
/// depends on seq_lens, so the caller can allocate once for its largest batch.
struct WorkspaceLayout {
  size_t partitions_off;  // PartitionStart [G + 1] (the plan kernel's)
  size_t requests_off;    // RequestPlan [b]
  size_t cost_off;        // int64 [b + 1]: prefix sums of the per-request cost (the plan kernel's scratch)
  size_t part_lse_off;    // float [max_slots, rows]: partial LSE (natural log)
  size_t part_max_off;    // float [max_slots, rows]: partial max logit (sparse decode's max_logits)
  size_t part_out_off;    // float [max_slots, rows, d_v]: partial outputs, normalised within their part
  size_t shard_lens_off;  // int32 [b]: a context shard's local lengths (docs/spec.md section 11)
  size_t causal_off;      // int32 [b, kMaxCausalRows]: a context shard's causal limits per query token
  size_t total;
  int64_t max_slots;      // 2 * G: two per partition (RequestPlan)
};

/// Query tokens per request whose causal limit a context shard's plan stores (kMaxQueryTokens of problems.h).
inline constexpr int64_t kMaxCausalRows = 8;

inline size_t align_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

inline WorkspaceLayout workspace_layout(int64_t batch, int64_t rows, int64_t partitions) {
  constexpr size_t kAlign = 256;
  WorkspaceLayout w{};
  w.max_slots = 2 * partitions;
  size_t off = 0;
  w.partitions_off = off;
  off = align_up(off + size_t(partitions + 1) * sizeof(PartitionStart), kAlign);
  w.requests_off = off;
  off = align_up(off + size_t(batch) * sizeof(RequestPlan), kAlign);
  w.cost_off = off;
  off = align_up(off + size_t(batch + 1) * sizeof(int64_t), kAlign);
  w.part_lse_off = off;
  off = align_up(off + size_t(w.max_slots * rows) * sizeof(float), kAlign);
  w.part_max_off = off;
  off = align_up(off + size_t(w.max_slots * rows) * sizeof(float), kAlign);
  w.part_out_off = off;
  off = align_up(off + size_t(w.max_slots * rows) * kDimV * sizeof(float), kAlign);
  w.shard_lens_off = off;
  off = align_up(off + size_t(batch) * sizeof(int32_t), kAlign);
  w.causal_off = off;
  off = align_up(off + size_t(batch) * kMaxCausalRows * sizeof(int32_t), kAlign);
  w.total = off;
  return w;
}

/// Where the plan and the kernels read the KV length of plan request r. Dense decode: a request is a batch
/// entry, its length seq_lens[r]. Sparse decode: a request is one query token (b, i) of the b x s_q, r = b s_q + i,
/// and its length is the number of index columns that count, topk_length[b] clamped to [0, topk], or topk
/// when there is no topk_length.
/// With an extra cache (DeepSeek V4, docs/spec.md section 2.1) a sparse request's index columns are its main ones,
/// then its extra ones: length = main length + extra length, each taken the same way from its own table.
struct RequestLengths {
  const int32_t* lens;  // may be null (sparse decode without topk_length): every request has length cap
  int64_t stride;       // elements between lens entries
  int32_t fold;         // plan requests per lens entry (and per batch entry of q, out, lse): 1 or s_q
  int32_t cap;          // lengths are clamped to [0, cap]
  const int32_t* extra_lens;  // extra_topk_length, may be null: every request then has extra_cap extra columns
  int64_t extra_stride;
  int32_t extra_cap;          // extra_topk; 0 without an extra cache
  FastDiv fold_div;           // divides a request by fold (fast_div.h); the default divides by 1
};

struct PlanParams {
  RequestLengths lens;
  int32_t batch;            // plan requests
  int32_t partitions;       // G
  int32_t tile_shift;       // log2 of the decode kernel's KV tile in tokens (request_tiles)
  PartitionStart* partitions_out;  // [G + 1]
  RequestPlan* requests_out;       // [b]
  int64_t* cost_scratch;           // [b + 1]
};

struct DecodeParams {
  const void* q;             // T [b, s_q, h_q, d_qk]
  int64_t q_stride_b, q_stride_s, q_stride_h;
  const uint8_t* pages;      // [num_pages, P, row_bytes]
  int64_t page_stride_bytes, row_stride_bytes;  // fp8_ds_v4: row_stride_bytes is the token block's 576 bytes
  int32_t page_shift;        // log2(P)
  // A split cache (docs/spec.md section 4; portable dense decode only): row t's k_pe columns live here, with their own
  // strides, and `pages` holds only its kv_c columns. Null: the row holds both.
  const uint8_t* k_pe_pages;
  int64_t k_pe_page_stride_bytes, k_pe_row_stride_bytes;
  const int32_t* block_table;  // [b, max_pages]; dense decode only
  int64_t block_table_stride;
  const int32_t* block_table_indptr;  // [b + 1] or null: block_table is then one flat list, request r's from [r]
  RequestLengths lens;         // seq_lens (dense) or topk_length (sparse)
  void* out;                 // T [b, s_q, h_q, d_v]
  int64_t out_stride_b, out_stride_s, out_stride_h;
  float* lse;                // float [b, s_q, h_q], may be null
  int64_t lse_stride_b, lse_stride_s, lse_stride_h;
  const float* kv_scale;     // fp8_e4m3: device scalar, may be null
  float kv_scale_value;      // used when kv_scale is null
  float softmax_scale;       // tau
  int32_t batch;             // plan requests: b (dense) or b * s_q (sparse)
  int32_t s_q, h_q;          // s_q = 1 in sparse decode, whose requests are single query tokens
  int32_t rows;              // s_q * h_q: query rows per request, row m = (i = m / h_q, h = m % h_q)
  FastDiv h_q_div;           // divides a row by h_q (fast_div.h)
  bool causal;
  // Context shard with the causal rule (docs/spec.md section 11): keys [0, causal_limits[r * kMaxCausalRows + i])
  // of request r are visible to its query token i, written by the plan. Null: the unsharded rule len - s_q + i + 1.
  const int32_t* causal_limits;
  // ---- sparse decode only (docs/spec.md section 2): rows come from indices, not from the block table ----
  const int32_t* indices;    // [b, s_q, topk]: global row ids, page * page_size + offset; null in dense decode
  int64_t indices_stride_b, indices_stride_s;
  int64_t num_rows;          // num_pages * page_size: ids outside [0, num_rows) are "no key"
  int32_t page_size;         // any P >= 1
  FastDiv page_div;          // divides an id by page_size (fast_div.h)
  const float* attn_sink;    // [h_q] or null
  // The extra cache (DeepSeek V4, sparse only; extra_indices null without one): index columns
  // [main length, main length + extra length) of a request name rows of this second pool, in the same format.
  const uint8_t* extra_pages;
  int64_t extra_page_stride_bytes, extra_row_stride_bytes;
  const int32_t* extra_indices;  // [b, s_q, extra_topk]
  int64_t extra_indices_stride_b, extra_indices_stride_s;
  int64_t extra_num_rows;
  int32_t extra_page_size;
  FastDiv extra_page_div;
  // Sparse decode's optional max_logits (float [b, s_q, h_q], the largest tau <q, K_j> over a row's valid keys):
  // written by the portable kernel, or through part_max and the combine for split rows. Null: not asked for.
  float* max_logits;
  int64_t max_logits_stride_b, max_logits_stride_s, max_logits_stride_h;
  int32_t partitions;        // G
  // Where a CTA finds its partition's bounds (cta_plan.cuh), one of three schedules:
  // whole_requests > 0: the whole-request schedule (sparse decode with uniform lengths, host.h's sparse_schedule):
  //   partition g takes requests [g k, g k + k) whole, k = whole_requests; nothing is split, no combine follows;
  // cta_plan: each CTA plans its own partition from the lengths (batches up to kCtaPlanMaxRequests), and the CTA
  //   holding a request's tile 0 writes its RequestPlan for the combine; no plan kernel ran;
  // neither: the plan kernel wrote plan_partitions and plan_requests.
  int32_t whole_requests;
  int32_t cta_plan;
  const PartitionStart* plan_partitions;
  RequestPlan* plan_requests;
  float* part_lse;           // [max_slots, rows]
  float* part_out;           // [max_slots, rows, d_v]
  float* part_max;           // [max_slots, rows]
};

}  // namespace mlakit::cuda::decode
