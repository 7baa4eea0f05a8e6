// merge_states launch (two-way and N-way): supports rules, parameter packing, dtype -> template dispatch.

#include "cuda/cache/common/host_util.h"
#include "cuda/cache/merge/merge.cuh"
#include "cuda/common/check.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace cache {
namespace {

constexpr int64_t kMaxGridX = 2147483647;
const char* const kWhy = "4-element vector steps of the cuda merge kernel";

/// A state tensor ([.., rows, d]) the kernel can step through 4 elements at a time.
Status check_state(const TensorView& t, const char* name) {
  if (t.numel() == 0) return {};
  return require_vector_rows(t, name, kMergeVec * int64_t(dtype_size(t.dtype)), kWhy);
}

Status check_common(int64_t rows, int64_t d) {
  MLAKIT_TRY(require_multiple("d", d, kMergeVec, "elements", kWhy));
  if (blocks_for(rows, kMergeWarpsPerBlock) > kMaxGridX) {
    return unsupported("rows", rows, "must be below 2^31 * 8 (grid size, 8 rows per block)");
  }
  return {};
}

MergeOut make_out(const TensorView& out, const TensorView& lse) {
  MergeOut o{};
  o.out = out.data;
  o.out_stride_row = out.stride[0];
  o.lse = lse.defined() ? lse.ptr<float>() : nullptr;
  o.lse_stride_row = lse.defined() ? lse.stride[0] : 0;
  o.rows = out.shape[0];
  o.d = out.shape[1];
  return o;
}

template <class Parts, class In, class Out>
Status launch(const Parts& parts, const MergeOut& o, cudaStream_t stream) {
  const int64_t blocks = blocks_for(o.rows, kMergeWarpsPerBlock);
  merge_kernel<Parts, In, Out><<<dim3(unsigned(blocks)), dim3(kMergeThreads), 0, stream>>>(parts, o);
  MLAKIT_CUDA_TRY_LAUNCH("merge_kernel");
  return {};
}

template <class Parts, class In>
Status dispatch_out(const Parts& parts, const MergeOut& o, DType out, cudaStream_t s) {
  switch (out) {
    case DType::kFP32: return launch<Parts, In, F32>(parts, o, s);
    case DType::kBF16: return launch<Parts, In, Bf16>(parts, o, s);
    case DType::kFP16: return launch<Parts, In, Fp16>(parts, o, s);
    default: return Status::internal("merge: out dtype passed validate() but has no kernel");
  }
}

template <class Parts>
Status dispatch(const Parts& parts, const MergeOut& o, DType in, DType out, cudaStream_t s) {
  switch (in) {
    case DType::kFP32: return dispatch_out<Parts, F32>(parts, o, out, s);
    case DType::kBF16: return dispatch_out<Parts, Bf16>(parts, o, out, s);
    case DType::kFP16: return dispatch_out<Parts, Fp16>(parts, o, out, s);
    default: return Status::internal("merge: part dtype passed validate() but has no kernel");
  }
}

}  // namespace
}  // namespace cache

Status merge_supports(const MergeProblem& p) {
  using namespace cache;
  MLAKIT_TRY(check_common(p.out.shape[0], p.out.shape[1]));
  MLAKIT_TRY(check_state(p.parts_out, "parts_out"));
  return check_state(p.out, "out");
}

Status merge_run(const MergeProblem& p, Stream stream) {
  using namespace cache;
  if (p.out.shape[0] == 0) return {};
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  StackedParts parts{};
  parts.out = p.parts_out.data;
  parts.out_stride_part = p.parts_out.stride[0];
  parts.out_stride_row = p.parts_out.stride[1];
  parts.lse = p.parts_lse.ptr<const float>();
  parts.lse_stride_part = p.parts_lse.stride[0];
  parts.lse_stride_row = p.parts_lse.stride[1];
  parts.n = p.parts_out.shape[0];
  return dispatch(parts, make_out(p.out, p.lse), p.parts_out.dtype, p.out.dtype, to_cuda(stream));
}

Status merge_pair_supports(const MergePairProblem& p) {
  using namespace cache;
  MLAKIT_TRY(check_common(p.out.shape[0], p.out.shape[1]));
  MLAKIT_TRY(check_state(p.out_a, "out_a"));
  MLAKIT_TRY(check_state(p.out_b, "out_b"));
  return check_state(p.out, "out");
}

Status merge_pair_run(const MergePairProblem& p, Stream stream) {
  using namespace cache;
  if (p.out.shape[0] == 0) return {};
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  PairParts parts{};
  parts.out[0] = p.out_a.data;
  parts.out[1] = p.out_b.data;
  parts.out_stride_row[0] = p.out_a.stride[0];
  parts.out_stride_row[1] = p.out_b.stride[0];
  parts.lse[0] = p.lse_a.ptr<const float>();
  parts.lse[1] = p.lse_b.ptr<const float>();
  parts.lse_stride_row[0] = p.lse_a.stride[0];
  parts.lse_stride_row[1] = p.lse_b.stride[0];
  return dispatch(parts, make_out(p.out, p.lse), p.out_a.dtype, p.out.dtype, to_cuda(stream));
}

}  // namespace mlakit::cuda
