#pragma once
// Host-side launchers shared by every decode kernel family: the plan and the combine kernels, and the
// launch configuration with programmatic dependent launch (PDL) that every decode launch uses. Each
// launcher returns a Status; none synchronises with the host.

#include <cuda_runtime_api.h>

#include "cuda/common/launch_sequence.h"
#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode {

/// A cudaLaunchConfig_t with the PDL attribute set when `pdl` (sm_90+): the kernel may start while the
/// previous one in the stream finishes, and waits for it in pdl_wait(). Not copyable: cfg points at attr.
struct PdlLaunch {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[2]{};
  /// `cluster_x` > 1: clusters of that many CTAs along x (the Hopper kernel's CTA pairs; grid.x a multiple of it).
  PdlLaunch(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, bool pdl, unsigned cluster_x = 1) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.stream = stream;
    cfg.attrs = attr;
    if (pdl) {
      attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
      ++cfg.numAttrs;
    }
    if (cluster_x > 1) {
      attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
      attr[cfg.numAttrs].val.clusterDim.x = cluster_x;
      attr[cfg.numAttrs].val.clusterDim.y = 1;
      attr[cfg.numAttrs].val.clusterDim.z = 1;
      ++cfg.numAttrs;
    }
  }
  PdlLaunch(const PdlLaunch&) = delete;
  PdlLaunch& operator=(const PdlLaunch&) = delete;
};

/// The single-CTA plan kernel (plan.cu).
Status launch_plan(const PlanParams& p, cudaStream_t stream, bool pdl);

/// Merges the partial results of every split request into out and lse (combine.cu, docs/spec.md section 6).
Status launch_combine(const DecodeParams& p, bool bf16, cudaStream_t stream, bool pdl);
/// The same as a launch description, for a sequence with the decode kernel; false when nothing is to merge (no launch).
/// `p` must outlive the launch.
bool combine_launch(const DecodeParams& p, bool bf16, bool pdl, KernelLaunch* out);

}  // namespace mlakit::cuda::decode
