#pragma once
// Host-side launches shared by every decode kernel family: the plan kernel's, and the combine's as a launch
// description (cuda/common/launch_sequence.h). Each returns a Status; none synchronises with the host.

#include <cuda_runtime_api.h>

#include "cuda/common/launch_sequence.h"
#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode {

/// The single-CTA plan kernel (plan.cu).
Status launch_plan(const PlanParams& p, cudaStream_t stream, bool pdl);

/// The launch that merges the partial results of every split request into out and lse (combine.cu, docs/spec.md
/// section 6), to follow the decode kernel in one sequence; false when nothing is to merge (no launch). `p` must
/// outlive the launch.
bool combine_launch(const DecodeParams& p, bool bf16, bool pdl, KernelLaunch* out);

}  // namespace mlakit::cuda::decode
