#include "cuda/common/tensor_map.h"

#include <cuda_runtime_api.h>
#include <cudaTypedefs.h>

#include <string>

namespace mlakit::cuda {
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

Status encode_tensor_map_16bit(CUtensorMap* map, const void* base, const uint64_t (&dims)[3],
                               const uint64_t (&byte_strides)[2], const uint32_t (&box)[3]) {
  const EncodeTiled encode = encoder();
  if (encode == nullptr) return Status::not_supported("the driver has no cuTensorMapEncodeTiled");
  const cuuint64_t d[3] = {dims[0], dims[1], dims[2]};
  const cuuint64_t st[2] = {byte_strides[0], byte_strides[1]};
  const cuuint32_t bx[3] = {box[0], box[1], box[2]};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT16, 3, const_cast<void*>(base), d, st, bx, elem_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                            CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    return Status::not_supported("cuTensorMapEncodeTiled refused the tensor (CUresult " + std::to_string(int(r)) + ")");
  }
  return {};
}

}  // namespace mlakit::cuda
