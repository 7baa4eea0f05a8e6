#pragma once
// Host helpers of the cache operations: the "field=value: rule" checks of the *_supports functions
// (alignment and vector-width rules that validate() does not know about).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "cuda/common/device.h"  // DeviceGuard, which the cache kernels' hosts use
#include "mlakit/status.h"
#include "mlakit/types.h"

namespace mlakit::cuda::cache {

/// "field=value: rule" as NotSupported: the call is valid, this backend's kernels do not handle it.
Status unsupported(std::string_view field, std::string_view value, std::string_view rule);
Status unsupported(std::string_view field, int64_t value, std::string_view rule);

/// `ptr` is a multiple of `bytes`, else "field=0x...: must be <bytes>-byte aligned (why)".
Status require_aligned(std::string_view field, const void* ptr, int64_t bytes, std::string_view why);
/// `value` is a multiple of `multiple`, else "field=value: must be a multiple of <multiple> <unit> (why)".
Status require_multiple(std::string_view field, int64_t value, int64_t multiple, std::string_view unit,
                        std::string_view why);
/// Data pointer aligned to `bytes` and every stride but the last a multiple of bytes / element size.
Status require_vector_rows(const TensorView& t, std::string_view name, int64_t bytes, std::string_view why);

/// The page sizes the cuda cache kernels take: a power of two in [1, 256], which they turn into shifts (validation
/// admits any P >= 1 for append_kv and gather_kv, as for sparse decode; the reference serves the others), else
/// "cache.page_size=P: must be a power of two in [1, 256] for the cuda <kernel> kernel ...".
Status require_shift_page_size(int64_t page_size, std::string_view kernel);
/// log2 of a power of two.
int log2_exact(int64_t power_of_two);


inline cudaStream_t to_cuda(Stream s) { return static_cast<cudaStream_t>(s); }

/// ceil(units / units_per_block): the 1-D grid that covers `units` work items.
inline int64_t blocks_for(int64_t units, int64_t units_per_block) {
  return (units + units_per_block - 1) / units_per_block;
}

}  // namespace mlakit::cuda::cache
