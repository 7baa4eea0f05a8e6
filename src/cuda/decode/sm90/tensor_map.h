#pragma once
// The TMA descriptor (CUtensorMap) of a 16-bit paged KV cache, encoded on the host for each run.

#include <cuda.h>

#include "mlakit/problems.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode::sm90 {

/// Describes `kv` as a rank-3 tensor {576 values, P rows, num_pages} with its own row and page strides,
/// read in boxes of 64 values x min(P, 64) rows x 1 page into the 128-byte swizzle wgmma reads. Fails
/// (not_supported) when the driver has no tensor-map entry point or refuses these strides; the kernel
/// then copies every tile row by row instead.
Status encode_kv_tensor_map(const KvCacheView& kv, CUtensorMap* map);

}  // namespace mlakit::cuda::decode::sm90
