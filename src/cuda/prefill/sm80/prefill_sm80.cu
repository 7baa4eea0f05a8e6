// The portable ragged prefill (issue 10) on the "cuda" backend: supports rules, parameter packing, launch.

#include <string>

#include "cuda/cache/common/host_util.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/ops.h"
#include "cuda/prefill/sm80/kernel.cuh"
#include "cuda/prefill/smxx/host.h"

namespace mlakit::cuda {
namespace prefill::sm80 {
namespace {

const char* const kWhy = "16-byte cp.async rows of the cuda prefill kernel";
constexpr int64_t kMaxGridX = 2147483647;

/// Dynamic shared memory of the kernel for a compiled (d_qk, d_v).
int smem_bytes(int64_t d_qk, int64_t d_v) {
  if (d_qk == 192) return PrefillSmem<192, 128>::total;
  return d_qk == 128 ? PrefillSmem<128, 128>::total : PrefillSmem<64, 64>::total;
}

/// The (d_qk, d_v) pairs compiled: MLA's 192/128 and the plain 128/128 and 64/64.
bool dims_compiled(int64_t d_qk, int64_t d_v) {
  return (d_qk == 192 && d_v == 128) || (d_qk == 128 && d_v == 128) || (d_qk == 64 && d_v == 64);
}


template <bool kBf16, int kDQK, int kDV>
Status launch(const PrefillParams& params, int64_t slots, int h_q, cudaStream_t stream) {
  auto kernel = prefill_kernel<kBf16, kDQK, kDV>;
  constexpr int kSmem = PrefillSmem<kDQK, kDV>::total;
  MLAKIT_TRY(allow_dynamic_smem(reinterpret_cast<const void*>(kernel), kSmem));
  kernel<<<dim3(unsigned(slots), unsigned(h_q)), kThreads, kSmem, stream>>>(params);
  MLAKIT_CUDA_TRY_LAUNCH("prefill_kernel");
  return {};
}

/// (d_qk, d_v) is one of dims_compiled's, which d_qk alone tells apart.
template <bool kBf16>
Status dispatch_dims(const PrefillParams& params, int64_t slots, int h_q, int64_t d_qk, cudaStream_t stream) {
  if (d_qk == 192) return launch<kBf16, 192, 128>(params, slots, h_q, stream);
  if (d_qk == 128) return launch<kBf16, 128, 128>(params, slots, h_q, stream);
  return launch<kBf16, 64, 64>(params, slots, h_q, stream);
}

}  // namespace
}  // namespace prefill::sm80

std::vector<Feature> prefill_features() {
  return {{OpKind::kPrefill,
           "portable (mma.sync, SM80+): bf16,fp16; (d_qk, d_v) = (192, 128), (128, 128), (64, 64); causal "
           "bottom-right or not; ragged, no host sync; rows that see no key give out 0 and lse -inf"}};
}

Status prefill_supports(const PrefillProblem& p) {
  using cache::unsupported;
  const int64_t d_qk = p.q.shape[2], d_v = p.v.shape[2];
  if (!prefill::sm80::dims_compiled(d_qk, d_v)) {
    return unsupported("(d_qk, d_v)", "(" + std::to_string(d_qk) + ", " + std::to_string(d_v) + ")",
                       "the cuda prefill kernel is compiled for (192, 128), (128, 128) and (64, 64)");
  }
  MLAKIT_TRY(prefill::check_rows(p, prefill::sm80::kWhy));
  // 64 KB at 192/128 (PrefillSmem), within the 99 KB a block may have on sm_86, sm_89 and sm_120; checked all the
  // same, so that a kernel that grows is declined by name rather than failing at launch.
  const DeviceInfo* info = nullptr;
  MLAKIT_TRY(cached_device_info(p.device().index, &info));
  const int need = prefill::sm80::smem_bytes(d_qk, d_v);
  if (need > info->max_smem_per_block_optin) {
    return unsupported("(d_qk, d_v)", "(" + std::to_string(d_qk) + ", " + std::to_string(d_v) + ")",
                       "the cuda prefill kernel needs " + std::to_string(need) + " bytes of shared memory per block "
                       "for it, device " + std::to_string(info->ordinal) + " allows " +
                       std::to_string(info->max_smem_per_block_optin));
  }
  if (prefill::grid_slots(p.q.shape[0], p.batch(), prefill::sm80::kBlockM) > prefill::sm80::kMaxGridX) {
    return unsupported("T_q", p.q.shape[0], "must leave T_q / 64 + b below 2^31 (grid size)");
  }
  return {};
}

Status prefill_run(const PrefillProblem& p, Stream stream) {
  if (p.q.shape[0] == 0) return {};
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  const prefill::PrefillParams params = prefill::make_params(p);
  const int64_t slots = prefill::grid_slots(p.q.shape[0], p.batch(), prefill::sm80::kBlockM);
  const int h_q = int(p.h_q());
  const cudaStream_t s = cache::to_cuda(stream);
  return p.q.dtype == DType::kBF16 ? prefill::sm80::dispatch_dims<true>(params, slots, h_q, p.q.shape[2], s)
                                   : prefill::sm80::dispatch_dims<false>(params, slots, h_q, p.q.shape[2], s);
}

}  // namespace mlakit::cuda
