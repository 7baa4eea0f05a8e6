// Stands in for instantiations/ when the build has no sm_90a code: the Hopper path reports why it cannot
// run, and its launch is never described (the backend's available() fails first).
#include "cuda/decode/sm90/launch.h"

namespace mlakit::cuda::decode::sm90 {

template <bool kBf16, KvKind kKind, bool kSparse, int kDqk>
Status decode_kernel_launch(const DecodeParams&, const CUtensorMap&, const int*, int, bool, KernelLaunch*) {
  return kernels_loadable();
}
#define MLAKIT_SM90_STUB(bf16, kind, sparse, dqk)                                                          \
  template Status decode_kernel_launch<bf16, KvKind::kind, sparse, dqk>(const DecodeParams&, const CUtensorMap&, \
                                                                         const int*, int, bool, KernelLaunch*);
MLAKIT_DECODE_SM90_KERNELS(MLAKIT_SM90_STUB)
#undef MLAKIT_SM90_STUB

Status kernels_loadable() {
  return Status::not_supported("this build has no sm_90a code (configure with MLAKIT_CUDA_ARCHS holding 90a)");
}

}  // namespace mlakit::cuda::decode::sm90
