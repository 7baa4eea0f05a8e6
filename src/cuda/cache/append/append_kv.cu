// append_kv launch: what the kernel handles (append_kv_supports), parameter packing, and the one place
// where the runtime input dtype and cache format become template values.

#include "cuda/cache/append/append_kv.cuh"
#include "cuda/cache/common/host_util.h"
#include "cuda/common/check.h"
#include "cuda/common/split_cache.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace cache {
namespace {

// Bytes one lane stores per 8-element latent chunk: 16 for bf16/fp16 rows, 8 for the fp8 formats.
int64_t chunk_store_bytes(KvFormat f) {
  return (f == KvFormat::kBF16 || f == KvFormat::kFP16) ? 2 * kChunk : kChunk;
}

constexpr int64_t kVectorLoadBytes = 16;  // one uint4 / float4 per lane
constexpr int64_t kFp8ChunkStoreBytes = kChunk;
constexpr int64_t kMaxGridX = 2147483647;  // gridDim.x limit (2^31 - 1)

AppendKvParams make_params(const AppendKvProblem& p) {
  const KvCacheView& c = p.cache;
  AppendKvParams k{};
  k.kv_c = p.kv_c.data;
  k.kv_c_stride = p.kv_c.stride[0];
  k.k_pe = p.k_pe.data;
  k.k_pe_stride = p.k_pe.stride[0];
  k.slot_mapping = p.slot_mapping.ptr<const int64_t>();
  k.slot_stride = p.slot_mapping.stride[0];
  k.cache = static_cast<uint8_t*>(c.pages.data);
  k.page_stride = c.pages.stride[0];
  // fp8_ds_v4's view has 584 bytes per token, but its tokens sit in 576-byte blocks (docs/spec.md section 4).
  k.row_stride = c.format == KvFormat::kFP8DsV4 ? ds_v4::kTokenBytes : c.pages.stride[1];
  k.capacity = c.num_pages() * c.page_size();
  k.log2_page_size = log2_exact(c.page_size());
  k.num_tokens = p.num_tokens();
  k.d_c = c.dims.d_c;
  k.d_r = c.dims.d_r;
  k.kv_scale = c.kv_scale;
  k.kv_scale_value = c.kv_scale_value;
  if (p.positions.defined()) {
    k.positions = p.positions.ptr<const int64_t>();
    k.positions_stride = p.positions.stride[0];
    k.cos_sin = p.cos_sin.ptr<const float>();
    k.cos_sin_stride = p.cos_sin.stride[0];
    k.max_pos = p.cos_sin.shape[0];
    k.neox = p.rope_style == RopeStyle::kNeox;
  }
  // q rows are only touched when there is something to do to them: RoPE or the fp8 copy.
  const bool q_work = p.q.defined() && (p.positions.defined() || p.q_fp8.defined());
  if (q_work) {
    k.q = p.q.data;
    k.q_stride_t = p.q.stride[0];
    k.q_stride_h = p.q.stride[1];
    k.h_q = int(p.q.shape[1]);
    k.q_is_bf16 = p.q.dtype == DType::kBF16;
    if (p.q_fp8.defined()) {
      k.q_fp8 = static_cast<uint8_t*>(p.q_fp8.data);
      k.q_fp8_stride_t = p.q_fp8.stride[0];
      k.q_fp8_stride_h = p.q_fp8.stride[1];
      k.q_scale = p.q_scale;
      k.q_scale_value = p.q_scale_value;
    }
  }
  return k;
}

template <class In, KvFormat kFormat>
Status launch(const AppendKvParams& k, int64_t q_rows, cudaStream_t stream) {
  const int64_t blocks = k.cache_blocks + blocks_for(q_rows, kAppendWarpsPerBlock);
  append_kv_kernel<In, kFormat><<<dim3(unsigned(blocks)), dim3(kAppendThreads), 0, stream>>>(k);
  MLAKIT_CUDA_TRY_LAUNCH("append_kv_kernel");
  return {};
}

template <class In>
Status dispatch_format(const AppendKvParams& k, KvFormat f, int64_t q_rows, cudaStream_t s) {
  switch (f) {
    case KvFormat::kBF16: return launch<In, KvFormat::kBF16>(k, q_rows, s);
    case KvFormat::kFP16: return launch<In, KvFormat::kFP16>(k, q_rows, s);
    case KvFormat::kFP8E4M3: return launch<In, KvFormat::kFP8E4M3>(k, q_rows, s);
    case KvFormat::kFP8DsMla: return launch<In, KvFormat::kFP8DsMla>(k, q_rows, s);
    case KvFormat::kFP8DsV4: return launch<In, KvFormat::kFP8DsV4>(k, q_rows, s);
  }
  return Status::internal("append_kv: unknown cache format");
}

}  // namespace
}  // namespace cache

Status append_kv_supports(const AppendKvProblem& p) {
  using namespace cache;
  const KvCacheView& c = p.cache;
  MLAKIT_TRY(refuse_split_cache(c, "cache", "the cuda append_kv kernel"));
  MLAKIT_TRY(require_shift_page_size(c.page_size(), "append_kv"));
  const std::string why = "8-element vector chunks of the cuda append_kv kernel";
  MLAKIT_TRY(require_multiple("cache.dims.d_c", c.dims.d_c, kChunk, "elements", why));
  if (p.num_tokens() > 0) MLAKIT_TRY(require_vector_rows(p.kv_c, "kv_c", kVectorLoadBytes, why));
  const int64_t store = chunk_store_bytes(c.format);
  MLAKIT_TRY(require_aligned("cache.pages.data", c.pages.data, store, why));
  if (c.num_pages() > 1) MLAKIT_TRY(require_multiple("cache.pages.stride[0]", c.pages.stride[0], store, "bytes", why));
  // fp8_ds_v4's stride[1] (584) says nothing of where its tokens lie: 576-byte blocks, 8-byte scale blocks.
  if (c.page_size() > 1 && c.format != KvFormat::kFP8DsV4) {
    MLAKIT_TRY(require_multiple("cache.pages.stride[1]", c.pages.stride[1], store, "bytes", why));
  }
  if (p.q_fp8.defined() && p.num_tokens() > 0) {
    MLAKIT_TRY(require_vector_rows(p.q, "q", kVectorLoadBytes, why + " (reading q for q_fp8)"));
    MLAKIT_TRY(require_vector_rows(p.q_fp8, "q_fp8", kFp8ChunkStoreBytes, why + " (writing q_fp8)"));
  }
  const int64_t q_rows = p.q.defined() ? p.num_tokens() * p.q.shape[1] : 0;
  const int64_t blocks = blocks_for(p.num_tokens(), kAppendWarpsPerBlock) + blocks_for(q_rows, kAppendWarpsPerBlock);
  if (blocks > int64_t(kMaxGridX)) {
    return unsupported("T", p.num_tokens(),
                       "needs " + std::to_string(blocks) + " blocks, above the grid limit " + std::to_string(kMaxGridX) +
                           " (8 tokens or q rows per block)");
  }
  return {};
}

Status append_kv_run(const AppendKvProblem& p, Stream stream) {
  using namespace cache;
  if (p.num_tokens() == 0) return {};
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  AppendKvParams k = make_params(p);
  k.cache_blocks = blocks_for(k.num_tokens, kAppendWarpsPerBlock);
  const int64_t q_rows = q_warps(k);
  const cudaStream_t s = to_cuda(stream);
  switch (p.kv_c.dtype) {
    case DType::kBF16: return dispatch_format<Bf16>(k, p.cache.format, q_rows, s);
    case DType::kFP16: return dispatch_format<Fp16>(k, p.cache.format, q_rows, s);
    case DType::kFP32: return dispatch_format<F32>(k, p.cache.format, q_rows, s);
    default: return Status::internal("append_kv: kv_c dtype passed validate() but has no kernel");
  }
}

}  // namespace mlakit::cuda
