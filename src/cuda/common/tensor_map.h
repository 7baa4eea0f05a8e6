#pragma once
// TMA descriptors (CUtensorMap) of 16-bit tensors, encoded on the host through the driver's
// cuTensorMapEncodeTiled, reached via the runtime's entry-point query so that nothing links against libcuda.

#include <cuda.h>

#include <cstdint>

#include "mlakit/status.h"

namespace mlakit::cuda {

/// A rank-3 tensor of 16-bit values, dims innermost first, with the byte strides of dims 1 and 2, read in
/// boxes of box[0] x box[1] x box[2] into the 128-byte swizzle that wgmma reads (box[0] * 2 must be 128); reads
/// outside the dims are zero-filled. not_supported when the driver has no encoder or refuses the geometry.
Status encode_tensor_map_16bit(CUtensorMap* map, const void* base, const uint64_t (&dims)[3],
                               const uint64_t (&byte_strides)[2], const uint32_t (&box)[3]);

}  // namespace mlakit::cuda
