#pragma once
// Host helpers both prefill paths share: the kernel parameters of a validated problem, and the row rule
// (16-byte aligned token rows: cp.async pieces on sm80, TMA boxes on sm90).

#include "cuda/prefill/smxx/params.h"
#include "mlakit/problems.h"

namespace mlakit::cuda::prefill {

/// The kernel parameters of `p` (strides in elements, scale in the log2 domain).
PrefillParams make_params(const PrefillProblem& p);

/// q, k, v and out: data 16-byte aligned and every stride but the last a multiple of 8 elements, else
/// "name.stride[i]=...: ... (why)".
Status check_rows(const PrefillProblem& p, const char* why);

}  // namespace mlakit::cuda::prefill
