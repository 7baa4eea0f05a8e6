// Standalone RoPE launch: every valid problem is supported (scalar accesses, no alignment rule).

#include <algorithm>

#include "cuda/cache/common/host_util.h"
#include "cuda/cache/rope/rope.cuh"
#include "cuda/common/check.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace cache {
namespace {

// Grid-stride loop: enough blocks to fill any current GPU (132 SMs x 8 blocks of 256 threads on an H100),
// capped so that huge T * H does not overflow the grid.
constexpr int64_t kRopeMaxBlocks = 65536;

template <class E>
Status launch(const RopeParams& k, cudaStream_t stream) {
  const int64_t pairs = k.num_tokens * k.num_heads * (k.d_r / 2);
  const int64_t blocks = std::min(blocks_for(pairs, kRopeThreads), kRopeMaxBlocks);
  rope_kernel<E><<<dim3(unsigned(blocks)), dim3(kRopeThreads), 0, stream>>>(k);
  MLAKIT_CUDA_TRY_LAUNCH("rope_kernel");
  return {};
}

}  // namespace
}  // namespace cache

Status rope_supports(const RopeProblem&) { return {}; }

Status rope_run(const RopeProblem& p, Stream stream) {
  using namespace cache;
  if (p.x.shape[0] == 0 || p.x.shape[1] == 0) return {};
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  RopeParams k{};
  k.x = p.x.data;
  k.x_stride_t = p.x.stride[0];
  k.x_stride_h = p.x.stride[1];
  k.num_tokens = p.x.shape[0];
  k.num_heads = p.x.shape[1];
  k.d_r = int(p.x.shape[2]);
  k.neox = p.style == RopeStyle::kNeox;
  k.positions = p.positions.ptr<const int64_t>();
  k.positions_stride = p.positions.stride[0];
  k.cos_sin = p.cos_sin.ptr<const float>();
  k.cos_sin_stride = p.cos_sin.stride[0];
  k.max_pos = p.cos_sin.shape[0];
  const cudaStream_t s = to_cuda(stream);
  switch (p.x.dtype) {
    case DType::kBF16: return launch<Bf16>(k, s);
    case DType::kFP16: return launch<Fp16>(k, s);
    case DType::kFP32: return launch<F32>(k, s);
    default: return Status::internal("rope: x dtype passed validate() but has no kernel");
  }
}

}  // namespace mlakit::cuda
