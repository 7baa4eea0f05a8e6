#pragma once
// Host-side launchers shared by every decode kernel family: the plan and the combine kernels, and the
// launch configuration with programmatic dependent launch (PDL) that every decode launch uses. Each
// launcher returns a Status; none synchronises with the host.

#include <cuda_runtime_api.h>

#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode {

/// A cudaLaunchConfig_t with the PDL attribute set when `pdl` (sm_90+): the kernel may start while the
/// previous one in the stream finishes, and waits for it in pdl_wait(). Not copyable: cfg points at attr.
struct PdlLaunch {
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr[1]{};
  PdlLaunch(dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t stream, bool pdl) {
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem_bytes;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
  }
  PdlLaunch(const PdlLaunch&) = delete;
  PdlLaunch& operator=(const PdlLaunch&) = delete;
};

/// The single-CTA plan kernel (plan.cu).
Status launch_plan(const PlanParams& p, cudaStream_t stream, bool pdl);

/// Merges the partial results of every split request into out and lse (combine.cu, docs/spec.md section 6).
Status launch_combine(const DecodeParams& p, bool bf16, cudaStream_t stream, bool pdl);

}  // namespace mlakit::cuda::decode
