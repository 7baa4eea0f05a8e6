// The few-row sparse decode kernel for q in bf16 with an fp8_ds_mla cache in DeepSeek V3's (V3.2's) geometry
// (few_rows.cuh).
#include "cuda/decode/sm80/few_rows.cuh"

namespace mlakit::cuda::decode {

__global__ void __launch_bounds__(few_rows::kThreads, few_rows::kMinBlocks)
    decode_few_rows_dsmla(const DecodeParams p) {
  decode_few_rows_body<few_rows::DsMla, /*kSparse=*/true>(p);
}

const FewRowsKernel kFewRowsDsMla = few_rows_entry<few_rows::DsMla, decode_few_rows_dsmla>();

}  // namespace mlakit::cuda::decode
