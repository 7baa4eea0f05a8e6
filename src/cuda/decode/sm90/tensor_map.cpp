// Host encoding of the KV cache's TMA descriptor (the encoder itself: cuda/common/tensor_map.cpp).

#include "cuda/decode/sm90/tensor_map.h"

#include <cuda_runtime_api.h>  // __host__ __device__ of config.h

#include <algorithm>

#include "cuda/common/tensor_map.h"
#include "cuda/decode/sm90/config.h"

namespace mlakit::cuda::decode::sm90 {

Status encode_kv_tensor_map(const KvCacheView& kv, CUtensorMap* map) {
  const uint64_t dims[3] = {uint64_t(kDimQK), uint64_t(kv.page_size()), uint64_t(kv.num_pages())};
  const uint64_t strides[2] = {uint64_t(kv.pages.stride[1]), uint64_t(kv.pages.stride[0])};  // bytes
  const uint32_t box[3] = {uint32_t(kSwizzleValues), uint32_t(std::min<int64_t>(kv.page_size(), kBlockN)), 1};
  return encode_tensor_map_16bit(map, kv.pages.data, dims, strides, box);
}

}  // namespace mlakit::cuda::decode::sm90
