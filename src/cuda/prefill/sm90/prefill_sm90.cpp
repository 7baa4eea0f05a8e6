// The Hopper ragged prefill (issue 10) on the "cuda_sm90" backend: supports rules, TMA descriptors, launch.

#include <string>

#include "cuda/cache/common/host_util.h"
#include "cuda/common/device.h"
#include "cuda/common/tensor_map.h"
#include "cuda/ops.h"
#include "cuda/prefill/sm90/launch.h"
#include "cuda/prefill/smxx/host.h"

namespace mlakit::cuda {
namespace prefill::sm90 {
namespace {

const char* const kWhy = "16-byte rows for the TMA boxes and cp.async rows of the cuda_sm90 prefill kernel";
/// Requests averaging at most this many keys take the persistent launch (kernel.cuh): their blocks have few key tiles,
/// so the launch, barrier set-up and exit of a CTA per block (and of one per slot with no rows) weigh on each.
constexpr int64_t kPersistentMaxAvgKeys = 1024;
constexpr int64_t kMaxGridX = 2147483647;
constexpr int64_t kMaxTokens = 2147483647;  // TMA coordinates are int32

/// [T, h, d] as a tensor map {d, h, T} read in boxes of 64 values x 1 head x 64 tokens. T = 0: nothing to encode
/// (no block reads it). A dimension of one element (h = 1, T = 1) never steps, so check_rows lets its stride be
/// anything, while the encoder wants every stride a multiple of 16 bytes: such a stride is given as that of packed
/// rows instead (the box never reaches a second head or token, so the value is never used).
Status encode(const TensorView& t, CUtensorMap* map) {
  if (t.shape[0] == 0) return {};
  const uint64_t dims[3] = {uint64_t(t.shape[2]), uint64_t(t.shape[1]), uint64_t(t.shape[0])};
  const uint64_t head_bytes = t.shape[1] == 1 ? dims[0] * 2 : uint64_t(t.stride[1]) * 2;
  const uint64_t token_bytes = t.shape[0] == 1 ? head_bytes * dims[1] : uint64_t(t.stride[0]) * 2;
  const uint64_t strides[2] = {head_bytes, token_bytes};
  const uint32_t box[3] = {64, 1, uint32_t(kTmaBoxRows)};
  return encode_tensor_map_16bit(map, t.data, dims, strides, box);
}

template <bool kBf16>
Status dispatch(const PrefillProblem& p, const PrefillParams& params, const CUtensorMap (&maps)[3], int64_t slots,
                int persistent_ctas, cudaStream_t stream) {
  const int h_q = int(p.h_q());
  if (p.q.shape[2] == 192) {
    return launch_prefill<kBf16, 192, 128>(params, maps[0], maps[1], maps[2], slots, h_q, persistent_ctas, stream);
  }
  return launch_prefill<kBf16, 128, 128>(params, maps[0], maps[1], maps[2], slots, h_q, persistent_ctas, stream);
}

/// One CTA per SM, when the requests are short on average and there are more items than SMs; 0 otherwise.
Status persistent_ctas_for(const PrefillProblem& p, int64_t slots, int* ctas) {
  *ctas = 0;
  if (p.k.shape[0] > kPersistentMaxAvgKeys * p.batch()) return {};
  const DeviceInfo* info = nullptr;
  MLAKIT_TRY(cached_device_info(p.device().index, &info));
  const int64_t items = slots * p.h_q();
  if (items > info->num_sms) *ctas = info->num_sms;
  return {};
}

}  // namespace
}  // namespace prefill::sm90

std::vector<Feature> prefill_sm90_features() {
  return {{OpKind::kPrefill,
           "bf16,fp16; (d_qk, d_v) = (192, 128), (128, 128); causal bottom-right or not; ragged, no host sync; "
           "128 rows per CTA over two consumer warpgroups, wgmma, TMA for whole key tiles (cp.async for a "
           "request's last partial one); a persistent grid for short requests (<= 1024 keys on average); sm_90a"}};
}

Status prefill_sm90_supports(const PrefillProblem& p) {
  using cache::unsupported;
  const int64_t d_qk = p.q.shape[2], d_v = p.v.shape[2];
  if (!((d_qk == 192 || d_qk == 128) && d_v == 128)) {
    // The pair appended to a std::string: "(" + std::to_string(...) makes GCC 12 warn of a memcpy overlap that cannot
    // happen (-Wrestrict on operator+(const char*, string&&), GCC bug 105329).
    return unsupported("(d_qk, d_v)", std::string("(").append(std::to_string(d_qk)) + ", " + std::to_string(d_v) + ")",
                       "the cuda_sm90 prefill kernel is compiled for (192, 128) and (128, 128)");
  }
  MLAKIT_TRY(prefill::check_rows(p, prefill::sm90::kWhy));
  if (p.q.shape[0] > prefill::sm90::kMaxTokens || p.k.shape[0] > prefill::sm90::kMaxTokens) {
    return unsupported("T_q + T_k", p.q.shape[0] + p.k.shape[0], "each must be below 2^31 (TMA coordinates)");
  }
  if (prefill::grid_slots(p.q.shape[0], p.batch(), prefill::sm90::kLaunchBlockM) > prefill::sm90::kMaxGridX) {
    return unsupported("T_q", p.q.shape[0], "must leave T_q / 128 + b below 2^31 (grid size)");
  }
  return {};
}

Status prefill_sm90_run(const PrefillProblem& p, Stream stream) {
  if (p.q.shape[0] == 0) return {};
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  CUtensorMap maps[3] = {};
  MLAKIT_TRY(prefill::sm90::encode(p.q, &maps[0]));
  MLAKIT_TRY(prefill::sm90::encode(p.k, &maps[1]));
  MLAKIT_TRY(prefill::sm90::encode(p.v, &maps[2]));
  const prefill::PrefillParams params = prefill::make_params(p);
  const int64_t slots = prefill::grid_slots(p.q.shape[0], p.batch(), prefill::sm90::kLaunchBlockM);
  int ctas = 0;
  MLAKIT_TRY(prefill::sm90::persistent_ctas_for(p, slots, &ctas));
  const cudaStream_t s = cache::to_cuda(stream);
  return p.q.dtype == DType::kBF16 ? prefill::sm90::dispatch<true>(p, params, maps, slots, ctas, s)
                                   : prefill::sm90::dispatch<false>(p, params, maps, slots, ctas, s);
}

}  // namespace mlakit::cuda
