// The few-row kernel for dense decode (one query token per request) with q in bf16 and an fp8_e4m3 cache
// (few_rows.cuh): the sparse kernel's body, its rows found through the block table.
#include "cuda/decode/sm80/few_rows.cuh"

namespace mlakit::cuda::decode {

__global__ void __launch_bounds__(few_rows::kThreads, few_rows::kMinBlocks)
    decode_few_rows_e4m3_dense(const DecodeParams p) {
  decode_few_rows_body<few_rows::E4m3, /*kSparse=*/false>(p);
}

const FewRowsKernel kFewRowsE4m3Dense = few_rows_entry<few_rows::E4m3, decode_few_rows_e4m3_dense>();

}  // namespace mlakit::cuda::decode
