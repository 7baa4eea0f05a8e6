// gather_kv launch: supports rules, parameter packing, format -> template dispatch.

#include "cuda/cache/common/host_util.h"
#include "cuda/cache/gather/gather_kv.cuh"
#include "cuda/common/check.h"
#include "cuda/common/split_cache.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace cache {
namespace {

constexpr int64_t kOutStoreBytes = 2 * kChunk;  // 8 bf16 per 16-byte store
constexpr int64_t kMaxGridX = 2147483647;

// Bytes one lane loads per chunk of the cache row: 16 for 16-bit rows, 8 for e4m3 (fp8_ds_mla's k_pe
// chunks are 16 bytes at offset 528 = 33 * 16, so its rows need 16-byte alignment too).
int64_t chunk_load_bytes(KvFormat f) { return f == KvFormat::kFP8E4M3 ? kChunk : 2 * kChunk; }

GatherKvParams make_params(const GatherKvProblem& p) {
  const KvCacheView& c = p.cache;
  GatherKvParams k{};
  k.cache = static_cast<const uint8_t*>(c.pages.data);
  k.page_stride = c.pages.stride[0];
  // fp8_ds_v4's view has 584 bytes per token, but its tokens sit in 576-byte blocks (docs/spec.md section 4).
  k.row_stride = c.format == KvFormat::kFP8DsV4 ? ds_v4::kTokenBytes : c.pages.stride[1];
  k.num_pages = c.num_pages();
  k.log2_page_size = log2_exact(c.page_size());
  k.block_table = p.block_table.ptr<const int32_t>();
  k.bt_stride_b = p.block_table.stride[0];
  k.bt_stride_page = p.block_table.stride[1];
  k.max_pages = p.block_table.shape[1];
  k.seq_lens = p.seq_lens.ptr<const int32_t>();
  k.seq_lens_stride = p.seq_lens.stride[0];
  k.cu_out = p.cu_out.ptr<const int32_t>();
  k.cu_out_stride = p.cu_out.stride[0];
  k.batch = p.batch();
  k.out = p.out.ptr<uint16_t>();
  k.out_stride = p.out.stride[0];
  k.total_rows = p.out.shape[0];
  k.d_qk = c.dims.d_qk();
  k.kv_scale = c.kv_scale;
  k.kv_scale_value = c.kv_scale_value;
  return k;
}

template <KvFormat kFormat>
Status launch(const GatherKvParams& k, cudaStream_t stream) {
  const int64_t blocks = blocks_for(k.total_rows, kGatherRowsPerBlock);
  gather_kv_kernel<kFormat><<<dim3(unsigned(blocks)), dim3(kGatherThreads), 0, stream>>>(k);
  MLAKIT_CUDA_TRY_LAUNCH("gather_kv_kernel");
  return {};
}

}  // namespace
}  // namespace cache

Status gather_kv_supports(const GatherKvProblem& p) {
  using namespace cache;
  const KvCacheView& c = p.cache;
  MLAKIT_TRY(refuse_split_cache(c, "cache", "the cuda gather_kv kernel"));
  MLAKIT_TRY(require_shift_page_size(c.page_size(), "gather_kv"));
  const std::string why = "8-element vector chunks of the cuda gather_kv kernel";
  MLAKIT_TRY(require_multiple("d_qk", c.dims.d_qk(), kChunk, "elements", why));
  if (p.out.shape[0] > 0) MLAKIT_TRY(require_vector_rows(p.out, "out", kOutStoreBytes, why));
  const int64_t load = chunk_load_bytes(c.format);
  MLAKIT_TRY(require_aligned("cache.pages.data", c.pages.data, load, why));
  if (c.num_pages() > 1) MLAKIT_TRY(require_multiple("cache.pages.stride[0]", c.pages.stride[0], load, "bytes", why));
  // fp8_ds_v4's stride[1] (584) says nothing of where its tokens lie: 576-byte blocks at 16-byte multiples.
  if (c.page_size() > 1 && c.format != KvFormat::kFP8DsV4) {
    MLAKIT_TRY(require_multiple("cache.pages.stride[1]", c.pages.stride[1], load, "bytes", why));
  }
  if (blocks_for(p.out.shape[0], kGatherRowsPerBlock) > kMaxGridX) {
    return unsupported("out.shape[0]", p.out.shape[0], "must be below 2^31 * 16 rows (grid size, 16 rows per block)");
  }
  return {};
}

Status gather_kv_run(const GatherKvProblem& p, Stream stream) {
  using namespace cache;
  if (p.out.shape[0] == 0) return {};
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  const GatherKvParams k = make_params(p);
  const cudaStream_t s = to_cuda(stream);
  switch (p.cache.format) {
    case KvFormat::kBF16: return launch<KvFormat::kBF16>(k, s);
    case KvFormat::kFP16: return launch<KvFormat::kFP16>(k, s);
    case KvFormat::kFP8E4M3: return launch<KvFormat::kFP8E4M3>(k, s);
    case KvFormat::kFP8DsMla: return launch<KvFormat::kFP8DsMla>(k, s);
    case KvFormat::kFP8DsV4: return launch<KvFormat::kFP8DsV4>(k, s);
  }
  return Status::internal("gather_kv: unknown cache format");
}

}  // namespace mlakit::cuda
