#pragma once
// The launcher of the Hopper prefill kernel: defined in launch_sm90.cu (built for sm_90a) or, in a build without
// sm_90a code, in unavailable.cpp, where it reports why it cannot run.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda/prefill/smxx/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::prefill::sm90 {

inline constexpr int kLaunchBlockM = 128;  // query rows per CTA (kernel.cuh's kBlockM)
inline constexpr int kTmaBoxRows = 64;     // rows (tokens) of every TMA box of Q, K and V (kernel.cuh's kBoxRows)

/// The compiled (bf16?, d_qk, d_v) kernels, for the instantiations in launch_sm90.cu and unavailable.cpp.
#define MLAKIT_PREFILL_SM90_KERNELS(X) X(true, 192, 128) X(false, 192, 128) X(true, 128, 128) X(false, 128, 128)

/// `slots` CTA slots per head (grid_slots) for `h_q` heads: one CTA per (slot, head), or, with `persistent_ctas` > 0,
/// that many CTAs walking the (slot, head) items (kernel.cuh).
template <bool kBf16, int kDQK, int kDV>
Status launch_prefill(const PrefillParams& p, const CUtensorMap& q_map, const CUtensorMap& k_map,
                      const CUtensorMap& v_map, int64_t slots, int h_q, int persistent_ctas, cudaStream_t stream);

}  // namespace mlakit::cuda::prefill::sm90
