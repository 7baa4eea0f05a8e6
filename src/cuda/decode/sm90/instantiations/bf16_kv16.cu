// Hopper dense decode kernel, q and cache in bf16; also the loadability check of the sm_90a image.
#include "cuda/decode/sm90/launch_kernel.cuh"

namespace mlakit::cuda::decode::sm90 {

template Status decode_kernel_launch<true, KvKind::k16Bit, false, kDimQK>(const DecodeParams&, const CUtensorMap&, const int*,
                                                                  int, bool, KernelLaunch*);

Status kernels_loadable() {
  cudaFuncAttributes attr{};
  const cudaError_t err = cudaFuncGetAttributes(&attr, decode_kernel<true, KvKind::k16Bit, false, false, kDimQK>);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it: the caller only asked
    return Status::not_supported(std::string("the sm_90a kernels cannot run on this device: ") +
                                 cudaGetErrorString(err));
  }
  return {};
}

}  // namespace mlakit::cuda::decode::sm90
