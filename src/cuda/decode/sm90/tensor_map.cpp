// Host encoding of the KV cache's TMA descriptor through the driver's cuTensorMapEncodeTiled, reached
// via the runtime's entry-point query so that nothing links against libcuda directly.

#include "cuda/decode/sm90/tensor_map.h"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <string>

#include "cuda/decode/sm90/config.h"

namespace mlakit::cuda::decode::sm90 {
namespace {

using EncodeTiled = PFN_cuTensorMapEncodeTiled_v12000;

/// The driver's encoder, looked up once per process (a function pointer that cannot change).
EncodeTiled encoder() {
  static const EncodeTiled fn = []() -> EncodeTiled {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    return reinterpret_cast<EncodeTiled>(ptr);
  }();
  return fn;
}

}  // namespace

Status encode_kv_tensor_map(const KvCacheView& kv, CUtensorMap* map) {
  const EncodeTiled encode = encoder();
  if (encode == nullptr) return Status::not_supported("the driver has no cuTensorMapEncodeTiled");
  const cuuint64_t dims[3] = {cuuint64_t(kDimQK), cuuint64_t(kv.page_size()), cuuint64_t(kv.num_pages())};
  const cuuint64_t strides[2] = {cuuint64_t(kv.pages.stride[1]), cuuint64_t(kv.pages.stride[0])};  // bytes
  const cuuint32_t box[3] = {cuuint32_t(kSwizzleValues), cuuint32_t(std::min<int64_t>(kv.page_size(), kBlockN)), 1};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void*>(kv.pages.data), dims, strides,
                            box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status::not_supported("cuTensorMapEncodeTiled refused the cache (CUresult " + std::to_string(int(r)) + ")");
  }
  return {};
}

}  // namespace mlakit::cuda::decode::sm90
