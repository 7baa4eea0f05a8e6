// Host entry points of the Hopper (sm_90a) dense decode (issue 8): availability, what it supports,
// workspace size, plan and run. Plan, combine, parameters and checks are the ones the portable path
// uses (smxx/); only the tile (64 tokens), the CTA (64 query rows, one per SM) and the launch differ.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/host_sm90.h"
#include "cuda/decode/sm90/launch.h"
#include "cuda/decode/sm90/tensor_map.h"
#include "cuda/decode/smxx/host.h"
#include "cuda/decode/smxx/launch.h"
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace {

constexpr const char* kPath = "cuda_sm90 decode";
/// Smallest page whose tiles the TMA boxes cover (P = 16: four boxes of 16 rows per chunk). Pages of one
/// token are gathered row by row.
constexpr int64_t kMinTmaPage = 16;

Status partitions_for(const DecodeProblem& p, int64_t* g) {
  return decode::sm90::partitions_for(decode::query_rows(p), p.device().index, g);
}

}  // namespace

std::vector<Feature> decode_sm90_features() {
  return {{OpKind::kDecode,
           "kv=bf16 (q bf16), fp16 (q fp16), fp8_e4m3, fp8_ds_mla (q bf16|fp16; fp8 from h_q x s_q >= 17); "
           "d_c=512, d_r=64; P=1,16,32,64,128 (TMA for 16-bit caches with P>=16; fp8 dequantised by the producer); "
           "block table 2-D or flat with indptr; h_q=1..128; s_q=1..8 causal|non-causal; any b incl. L=0; wgmma + "
           "warp-specialised pipeline; device-side "
           "split-KV plan; sm_90a"}};
}

Status decode_sm90_available(int ordinal) {
  decode::DeviceFacts* facts = nullptr;
  MLAKIT_TRY(decode::device_facts(ordinal, &facts));
  const DeviceInfo& info = *facts->info;
  if (info.sm_major != 9 || info.sm_minor != 0) {
    return Status::not_supported("needs compute capability 9.0 (sm_90a code runs on Hopper only), device " +
                                 std::to_string(info.ordinal) + " is " + std::to_string(info.sm_major) + "." +
                                 std::to_string(info.sm_minor));
  }
  // Whether the sm_90a image loads on this device cannot change either: asked once per (thread, device) that can
  // (every public call asks, and cudaFuncGetAttributes costs microseconds); a failure is asked again. The query runs
  // on the current device, so the device asked about is made current for it.
  if (facts->sm90_loadable) return {};
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(Device::cuda(ordinal)));
  MLAKIT_TRY(decode::sm90::kernels_loadable());
  facts->sm90_loadable = true;
  return {};
}

Status decode_sm90_supports(const DecodeProblem& p) {
  MLAKIT_TRY(decode::check_decode_common(p, kPath, /*split=*/false));
  return decode::sm90::check_fp8_rows(p.kv.format, decode::query_rows(p), kPath);
}

size_t decode_sm90_workspace_bytes(const DecodeProblem& p) {
  int64_t g = 0;  // sized for the tensors' device (its partitions follow that device's SM count)
  if (!partitions_for(p, &g).ok()) return 0;
  return decode::layout_for(p, g).total;
}

Status decode_sm90_plan(const DecodeProblem& p, Workspace ws, Stream stream) {
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  int64_t g = 0;
  MLAKIT_TRY(partitions_for(p, &g));
  return decode::launch_plan_for(p, ws, g, decode::sm90::kTileShift, static_cast<cudaStream_t>(stream), true);
}

Status decode_sm90_run(const DecodeProblem& p, Workspace ws, Stream stream) {
  MLAKIT_TRY(decode::check_workspace_alignment(ws));
  DeviceGuard guard;
  MLAKIT_TRY(guard.set(p.device()));
  int64_t g = 0;
  MLAKIT_TRY(partitions_for(p, &g));
  const decode::DecodeParams d = decode::make_params(p, ws, g);
  const decode::KvKind kind = decode::kv_kind(p.kv.format);
  CUtensorMap map{};
  const bool tma = kind == decode::KvKind::k16Bit && p.kv.page_size() >= kMinTmaPage &&
                   decode::sm90::encode_kv_tensor_map(p.kv, &map).ok();
  return decode::sm90::launch_sm90(d, p.q.dtype == DType::kBF16, kind, /*sparse=*/false, /*v4=*/false, map, tma,
                                   decode::query_rows(p), static_cast<cudaStream_t>(stream));
}

}  // namespace mlakit::cuda
