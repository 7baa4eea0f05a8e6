// The few-row sparse decode kernel for q in bf16 with an fp8_e4m3 cache in DeepSeek V3's geometry
// (few_rows.cuh).
#include "cuda/decode/sm80/few_rows.cuh"
#include "cuda/decode/sm80/few_rows_launch.h"

namespace mlakit::cuda::decode {

__global__ void __launch_bounds__(few_rows::kThreads, few_rows::kMinBlocks)
    decode_few_rows_e4m3(const DecodeParams p) {
  decode_few_rows_body<few_rows::E4m3, /*kSparse=*/true>(p);
}

Status launch_few_rows_e4m3(const DecodeParams& p, cudaStream_t stream, bool pdl) {
  return launch_few_rows_kernel<few_rows::E4m3>(decode_few_rows_e4m3, p, stream, pdl);
}

Status few_rows_e4m3_occupancy(int max_smem_per_block, int* ctas_per_sm) {
  return few_rows_kernel_occupancy<few_rows::E4m3>(decode_few_rows_e4m3, max_smem_per_block, ctas_per_sm);
}

}  // namespace mlakit::cuda::decode
