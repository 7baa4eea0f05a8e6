// The few-row sparse decode kernel for q in bf16 with an fp8_ds_v4 cache in DeepSeek V4's geometry (few_rows.cuh).
#include "cuda/decode/sm80/few_rows.cuh"

namespace mlakit::cuda::decode {

__global__ void __launch_bounds__(few_rows::kThreads, few_rows::kMinBlocks) decode_few_rows_dsv4(const DecodeParams p) {
  decode_few_rows_body<few_rows::DsV4, /*kSparse=*/true>(p);
}

const FewRowsKernel kFewRowsDsV4 = few_rows_entry<few_rows::DsV4, decode_few_rows_dsv4>();

}  // namespace mlakit::cuda::decode
