// The few-row kernel for dense decode (one query token per request) with q in bf16 and an fp8_ds_mla cache
// (few_rows.cuh): the sparse kernel's body, its rows found through the block table.
#include "cuda/decode/sm80/few_rows.cuh"

namespace mlakit::cuda::decode {

__global__ void __launch_bounds__(few_rows::kThreads, few_rows::kMinBlocks)
    decode_few_rows_dsmla_dense(const DecodeParams p) {
  decode_few_rows_body<few_rows::DsMla, /*kSparse=*/false>(p);
}

const FewRowsKernel kFewRowsDsMlaDense = few_rows_entry<few_rows::DsMla, decode_few_rows_dsmla_dense>();

}  // namespace mlakit::cuda::decode
