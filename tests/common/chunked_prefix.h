#pragma once
// Chunked prefix, end to end (docs/spec.md section 3, issue 10 item 2): the new tokens of each request attend to
// every chunk of its cached prefix (causal = false) and to themselves (causal = true, bottom-right), and merging
// the partial states (docs/spec.md section 6) must give the unchunked causal prefill over prefix + new tokens,
// within docs/spec.md section 10's bf16 tolerance. The partial states are bf16, as an engine's would be. The
// calls run through a Runner, so that the CPU test runs them on the reference and the GPU test on a CUDA backend.

#include <cstdint>
#include <functional>
#include <vector>

#include "mlakit/problems.h"

namespace mlakit::test {

struct ChunkedRequest {
  int32_t prefix, fresh;  // cached prefix tokens, new tokens (queries)
};

/// Runs a problem whose tensors are contiguous host buffers and leaves its outputs in them.
struct Runner {
  std::function<Status(const PrefillProblem&)> prefill;
  std::function<Status(const MergeProblem&)> merge;
};

/// Every prefix split into `chunks` (each chunk must hold at least as many keys as its request has new tokens:
/// docs/spec.md section 3's Lk >= Lq). Heads 2, d 192/128, values uniform in [-1, 1].
void expect_chunked_prefix_matches_unchunked(const std::vector<ChunkedRequest>& reqs, int chunks, uint64_t seed,
                                             const Runner& run);

}  // namespace mlakit::test
