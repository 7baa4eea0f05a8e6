#pragma once
// Random inputs for dense and sparse decode (docs/spec.md sections 1 and 2), held in host vectors, built the
// way the tests of docs/spec.md section 10 want them:
//  - a paged cache in any KvFormat whose unused rows, unused pages and page padding are all 0xFF bytes
//    (NaN in bf16, fp16 and e4m3; a NaN scale in fp8_ds_mla), so any read of them shows up as NaN;
//  - a shuffled block table with -1 past the used pages and garbage in the row-stride padding;
//  - out poisoned with NaN and lse with NaN before the call;
//  - the dequantised value of every written row, decoded from the bytes by this file's own decoders
//    (not the library's), for float64 oracles and for the vmax of the tolerance.
// GPU tests copy the buffers to the device and call problem(...) with device pointers and Device::cuda().

#include <cstdint>
#include <vector>

#include "mlakit/problems.h"

namespace mlakit::test {

/// DeepSeek-V3's tau (docs/spec.md section 7): 1.3688879^2 / sqrt(192).
inline constexpr float kDeepSeekSoftmaxScale = 0.13523378f;
/// Every poisoned byte: 0xFFFF is NaN in bf16/fp16, 0xFF in e4m3, 0xFFFFFFFF in float32.
inline constexpr uint8_t kPoisonByte = 0xFF;
/// 16-bit pattern of a poisoned bf16/fp16 output element.
inline constexpr uint16_t kPoison16 = 0xFFFF;
/// Block-table entries past the used pages (FlashMLA's convention) and in the row-stride padding.
inline constexpr int32_t kUnusedPage = -1;
inline constexpr int32_t kTablePadding = INT32_MIN;

/// Dequantises one cache row from its bytes, independently of src/reference (for oracles).
void oracle_decode_row(KvFormat format, MlaDims dims, float kv_scale, const uint8_t* row, float* out);
/// 16-bit pattern -> float32 for bf16/fp16, independently of numeric.h.
double oracle_half_to_double(uint16_t bits, DType dtype);

struct DecodeCaseConfig {
  std::vector<int32_t> seq_lens{1, 100};  ///< L_b per request; b = seq_lens.size(); 0 is legal
  int64_t s_q = 1;
  int64_t h_q = 16;
  MlaDims dims{};
  int64_t page_size = 64;
  KvFormat format = KvFormat::kBF16;
  DType q_dtype = DType::kBF16;
  bool causal = false;
  float softmax_scale = kDeepSeekSoftmaxScale;
  /// fp8_e4m3 only. Values up to 1 become e4m3 magnitudes up to 64, well inside the +-448 range.
  float kv_scale = 1.0f / 64.0f;
  float value_range = 1.0f;           ///< KV values uniform in [-value_range, value_range]
  float q_range = 1.0f;               ///< q values uniform in [-q_range, q_range]; 0 gives uniform softmax
  int64_t extra_pages = 3;            ///< unused, poisoned pages in the pool
  int64_t extra_table_columns = 2;    ///< block-table columns past the longest request (kUnusedPage)
  int64_t table_row_padding = 1;      ///< block_table row stride = columns + padding (kTablePadding)
  int64_t page_padding_bytes = 0;     ///< poisoned bytes between pages (page stride > P * row_bytes)
  bool with_lse = true;
  uint64_t seed = 1;
  /// The problem's context shard. generate() always builds the whole cache; shard_case() builds one rank's part.
  ContextShard shard{};
};

/// Where the buffers of a case live: host vectors by default, or device copies.
struct DecodeBuffers {
  const void* q = nullptr;
  const void* cache = nullptr;
  const void* block_table = nullptr;
  const void* seq_lens = nullptr;
  void* out = nullptr;
  void* lse = nullptr;               ///< ignored when the case has no lse
  const float* kv_scale = nullptr;   ///< fp8_e4m3: a scalar on the same device, or null to pass the value
  const void* k_pe_cache = nullptr;  ///< split caches only (split_case)
  const void* block_table_indptr = nullptr;  ///< flat block tables only (split_case)
};

struct DecodeCase {
  DecodeCaseConfig config;
  int64_t batch = 0;
  int64_t num_pages = 0;
  int64_t page_stride_bytes = 0;     ///< P * row_bytes + page_padding_bytes
  int64_t table_columns = 0;         ///< block_table.shape[1]
  int64_t table_row_stride = 0;      ///< block_table.stride[0], in elements

  std::vector<uint16_t> q;           ///< q_dtype bits [b, s_q, h_q, d_qk]
  std::vector<uint8_t> cache;        ///< [num_pages, page_stride_bytes]
  std::vector<int32_t> block_table;  ///< [b, table_row_stride]
  std::vector<int32_t> seq_lens;     ///< [b]
  std::vector<uint16_t> out;         ///< q_dtype bits [b, s_q, h_q, d_v], poisoned
  std::vector<float> lse;            ///< [b, s_q, h_q], poisoned; empty without lse
  /// split_case() forms (empty otherwise): the k_pe part of a split cache, whose `cache` then holds kv_c only
  /// ([num_pages, page_stride_bytes] with rows of d_c values), and the indptr of a flat block_table.
  std::vector<uint8_t> k_pe_cache;   ///< [num_pages, k_pe_page_stride], rows k_pe_row_stride apart
  int64_t k_pe_page_stride = 0, k_pe_row_stride = 0;
  std::vector<int32_t> table_indptr; ///< [b + 1]: block_table is then flat, request b's pages from table_indptr[b]
  /// Dequantised rows of request b: kv_rows[b][t * d_qk + c] for t < L_b (oracle_decode_row of the bytes).
  std::vector<std::vector<float>> kv_rows;

  static DecodeCase generate(const DecodeCaseConfig& config);

  /// The problem over the given buffers on `device`.
  DecodeProblem problem(const DecodeBuffers& at, Device device) const;
  /// The problem over this object's host vectors.
  DecodeProblem problem();
  DecodeBuffers host_buffers();

  /// Resets out and lse to the poison pattern (before running again on the same case).
  void poison_outputs();
  /// out as float32 [b, s_q, h_q, d_v].
  std::vector<float> out_floats() const;
  /// q as float64 [b, s_q, h_q, d_qk] (oracle_half_to_double of the bits).
  std::vector<double> q_values() const;
  /// Largest |V| over the rows of request b (V = first d_c columns): docs/spec.md 10's vmax, per request.
  float request_vmax(int64_t b) const;
  /// request_vmax repeated for every output row [b, s_q, h_q], as check_out wants it.
  std::vector<float> row_vmax() const;
};

/// Rank `shard.rank`'s part of `whole` (docs/spec.md section 11): the same q, seq_lens (global) and outputs (poisoned),
/// a cache holding only the tokens the rank owns, at their local indices, in pages drawn from a shuffled pool with
/// poisoned extra pages, and a block table to match. kv_rows stay the whole request's (vmax over every rank's rows).
DecodeCase shard_case(const DecodeCase& whole, ContextShard shard, uint64_t seed);

/// `whole` with the same rows, q and outputs, held in the alternative forms of docs/spec.md sections 1 and 4 (FlashInfer's
/// layout): `split_cache` moves each row's k_pe into k_pe_cache (element formats only), each part with poisoned padding
/// between rows and pages; `flat_table` lists every request's pages in one flat block_table, each list followed by
/// one kUnusedPage, with table_indptr. Unsharded cases only.
DecodeCase split_case(const DecodeCase& whole, bool split_cache, bool flat_table);

struct SparseCaseConfig {
  int64_t batch = 2;
  int64_t s_q = 1;
  int64_t h_q = 16;
  int64_t topk = 64;
  MlaDims dims{};
  int64_t page_size = 64;
  int64_t num_pages = 4;
  KvFormat format = KvFormat::kBF16;
  DType q_dtype = DType::kBF16;
  float softmax_scale = kDeepSeekSoftmaxScale;
  float kv_scale = 1.0f / 64.0f;
  float value_range = 1.0f;
  float q_range = 1.0f;
  double written_fraction = 0.5;     ///< share of cache rows written; only those are ever indexed
  double invalid_fraction = 0.25;    ///< share of used columns holding a negative id (-1, -2, INT32_MIN...)
  /// Per-request topk_length; empty = not given. Columns past it point at poisoned rows.
  std::vector<int32_t> topk_length;
  std::vector<float> attn_sink;      ///< [h_q]; empty = not given
  bool with_lse = true;
  uint64_t seed = 1;
};

struct SparseBuffers {
  const void* q = nullptr;
  const void* cache = nullptr;
  const void* indices = nullptr;
  const void* topk_length = nullptr;  ///< ignored when the case has none
  const void* attn_sink = nullptr;    ///< ignored when the case has none
  void* out = nullptr;
  void* lse = nullptr;
  const float* kv_scale = nullptr;
};

struct SparseCase {
  SparseCaseConfig config;
  std::vector<uint16_t> q;            ///< q_dtype bits [b, s_q, h_q, d_qk]
  std::vector<uint8_t> cache;         ///< [num_pages, P, row_bytes], unwritten rows poisoned
  std::vector<int32_t> indices;       ///< [b, s_q, topk]
  std::vector<int32_t> topk_length;   ///< [b] or empty
  std::vector<float> attn_sink;       ///< [h_q] or empty
  std::vector<uint16_t> out;          ///< poisoned
  std::vector<float> lse;             ///< poisoned; empty without lse
  /// Dequantised value of every cache row [num_pages * P, d_qk] (NaN for unwritten rows).
  std::vector<float> row_values;

  static SparseCase generate(const SparseCaseConfig& config);
  SparseDecodeProblem problem(const SparseBuffers& at, Device device) const;
  SparseDecodeProblem problem();
  SparseBuffers host_buffers();
  void poison_outputs();
  std::vector<float> out_floats() const;
  std::vector<double> q_values() const;
  /// Columns of request b that count (topk_length[b] or topk).
  int64_t used_columns(int64_t b) const;
  /// Largest |V| over the valid rows indexed by (b, i): vmax per output row [b, s_q, h_q].
  std::vector<float> row_vmax() const;
};

}  // namespace mlakit::test
