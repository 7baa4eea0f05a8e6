// The few-row sparse decode kernel for q in bf16 with an fp8_e4m3 cache in DeepSeek V3's geometry
// (few_rows.cuh).
#include "cuda/decode/sm80/few_rows.cuh"

namespace mlakit::cuda::decode {

__global__ void __launch_bounds__(few_rows::kThreads, few_rows::kMinBlocks)
    decode_few_rows_e4m3(const DecodeParams p) {
  decode_few_rows_body<few_rows::E4m3, /*kSparse=*/true>(p);
}

const FewRowsKernel kFewRowsE4m3 = few_rows_entry<few_rows::E4m3, decode_few_rows_e4m3>();

}  // namespace mlakit::cuda::decode
