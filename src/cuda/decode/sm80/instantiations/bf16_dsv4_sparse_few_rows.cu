// The few-row sparse decode kernel for q in bf16 with an fp8_ds_v4 cache in DeepSeek V4's geometry (few_rows.cuh).
#include <cuda_runtime.h>

#include "cuda/common/check.h"
#include "cuda/decode/sm80/few_rows.cuh"
#include "cuda/decode/sm80/few_rows_launch.h"
#include "cuda/decode/smxx/launch.h"

namespace mlakit::cuda::decode {

Status launch_few_rows_dsv4(const DecodeParams& p, cudaStream_t stream, bool pdl) {
  if (p.rows > few_rows::kRows) return Status::internal("decode: the few-row kernel takes at most 16 rows");
  MLAKIT_CUDA_TRY(cudaFuncSetAttribute(decode_few_rows_dsv4, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       few_rows::kSmemBytes));
  PdlLaunch l(dim3(1, p.partitions), dim3(few_rows::kThreads), few_rows::kSmemBytes, stream, pdl);
  MLAKIT_CUDA_TRY(cudaLaunchKernelEx(&l.cfg, decode_few_rows_dsv4, p));
  return {};
}

Status few_rows_dsv4_occupancy(int* ctas_per_sm) {
  MLAKIT_CUDA_TRY(cudaFuncSetAttribute(decode_few_rows_dsv4, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       few_rows::kSmemBytes));
  MLAKIT_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(ctas_per_sm, decode_few_rows_dsv4, few_rows::kThreads,
                                                                few_rows::kSmemBytes));
  return {};
}

}  // namespace mlakit::cuda::decode
