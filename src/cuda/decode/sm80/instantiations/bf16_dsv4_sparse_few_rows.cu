// The few-row sparse decode kernel for q in bf16 with an fp8_ds_v4 cache in DeepSeek V4's geometry (few_rows.cuh).
#include "cuda/decode/sm80/few_rows.cuh"
#include "cuda/decode/sm80/few_rows_launch.h"

namespace mlakit::cuda::decode {

__global__ void __launch_bounds__(few_rows::kThreads, few_rows::kMinBlocks) decode_few_rows_dsv4(const DecodeParams p) {
  decode_few_rows_body<few_rows::DsV4, /*kSparse=*/true>(p);
}

Status launch_few_rows_dsv4(const DecodeParams& p, cudaStream_t stream, bool pdl) {
  return launch_few_rows_kernel<few_rows::DsV4>(decode_few_rows_dsv4, p, stream, pdl);
}

Status few_rows_dsv4_occupancy(int max_smem_per_block, int* ctas_per_sm) {
  return few_rows_kernel_occupancy<few_rows::DsV4>(decode_few_rows_dsv4, max_smem_per_block, ctas_per_sm);
}

}  // namespace mlakit::cuda::decode
