#pragma once
// Context parallelism in tests (docs/spec.md section 11): the partial results of world shards of one decode case,
// merged by a backend's merge (section 6), for comparison with the unsharded result.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/decode_case.h"
#include "mlakit/backend.h"

namespace mlakit::test {

/// Partials of `world` ranks, as ContextParallelDecode exchanges them: out in the dtype of q, LSE in float32.
struct ShardPartials {
  int64_t rows = 0;              ///< b * s_q * h_q
  std::vector<uint16_t> out;     ///< [world, rows, d_v]
  std::vector<float> lse;        ///< [world, rows]
};

/// Merges `parts` with `merge` on the host (CPU tensors) into `into`'s out and lse.
::testing::AssertionResult merge_partials(const Backend& merge, const ShardPartials& parts, int world,
                                          DecodeCase& into);

}  // namespace mlakit::test
