// Host helpers of the Hopper kernel family (host_sm90.h).

#include "cuda/decode/sm90/host_sm90.h"

#include <algorithm>
#include <string>

#include "cuda/decode/sm90/config.h"
#include "cuda/decode/sm90/launch.h"
#include "cuda/decode/smxx/host.h"
#include "cuda/decode/smxx/launch.h"

namespace mlakit::cuda::decode::sm90 {

int64_t row_blocks_for(int64_t rows) { return (rows + kRows - 1) / kRows; }

Status partitions_for(int64_t rows, int ordinal, int64_t* g) {
  DeviceFacts* facts = nullptr;
  MLAKIT_TRY(device_facts(ordinal, &facts));
  *g = std::max<int64_t>(1, int64_t(facts->info->num_sms) / row_blocks_for(rows));
  return {};
}

namespace {

template <bool kSparse, int kDqk>
Status launch_kernel(const DecodeParams& d, bool bf16, KvKind kind, const CUtensorMap& map, bool use_tma, int rb,
                     cudaStream_t stream) {
  const bool tma = use_tma && !kSparse;  // only dense 16-bit tiles come by TMA
  if constexpr (kDqk == kDimQKV4) {
    // V4's geometry (sparse only), q in bf16 like the portable path's V4 kernels (check_q_kv_out enforces both).
    if (!kSparse || !bf16) return Status::internal("decode: the Hopper V4 kernels are sparse with q in bf16");
    switch (kind) {
      case KvKind::k16Bit: return launch_decode_kernel<true, KvKind::k16Bit, kSparse, kDqk>(d, map, false, rb, stream, true);
      case KvKind::kE4M3: return launch_decode_kernel<true, KvKind::kE4M3, kSparse, kDqk>(d, map, false, rb, stream, true);
      case KvKind::kDsV4: return launch_decode_kernel<true, KvKind::kDsV4, kSparse, kDqk>(d, map, false, rb, stream, true);
      case KvKind::kDsMla: break;  // fp8_ds_mla holds V3 rows only (validation)
    }
  } else {
    switch (kind) {
      case KvKind::k16Bit:
        return bf16 ? launch_decode_kernel<true, KvKind::k16Bit, kSparse, kDqk>(d, map, tma, rb, stream, true)
                    : launch_decode_kernel<false, KvKind::k16Bit, kSparse, kDqk>(d, map, tma, rb, stream, true);
      case KvKind::kE4M3:
        return bf16 ? launch_decode_kernel<true, KvKind::kE4M3, kSparse, kDqk>(d, map, false, rb, stream, true)
                    : launch_decode_kernel<false, KvKind::kE4M3, kSparse, kDqk>(d, map, false, rb, stream, true);
      case KvKind::kDsMla:
        return bf16 ? launch_decode_kernel<true, KvKind::kDsMla, kSparse, kDqk>(d, map, false, rb, stream, true)
                    : launch_decode_kernel<false, KvKind::kDsMla, kSparse, kDqk>(d, map, false, rb, stream, true);
      case KvKind::kDsV4: break;  // fp8_ds_v4 holds V4 rows only (validation)
    }
  }
  return Status::internal("decode: no Hopper kernel for this kv kind and geometry");
}

}  // namespace

Status check_fp8_rows(KvFormat format, int64_t rows, const char* path) {
  const bool fp8 = format == KvFormat::kFP8E4M3 || format == KvFormat::kFP8DsMla || format == KvFormat::kFP8DsV4;
  if (fp8 && rows < kFp8MinRows) {
    return Status::not_supported(std::string("kv.format=") + kv_format_name(format) + " with " + std::to_string(rows) +
                                 " query rows per request: " + path + " serves fp8 caches from " +
                                 std::to_string(kFp8MinRows) +
                                 " rows up (below, the portable 'cuda' kernel is faster: docs/performance.md)");
  }
  return {};
}

Status launch_sm90(const DecodeParams& d, bool bf16, KvKind kind, bool sparse, bool v4, const CUtensorMap& map,
                   bool use_tma, int64_t rows, cudaStream_t stream) {
  const int rb = int(row_blocks_for(rows));
  if (v4 && !sparse) return Status::internal("decode: V4's geometry is served for sparse decode only");
  Status launched;
  if (!sparse) {
    launched = launch_kernel<false, kDimQK>(d, bf16, kind, map, use_tma, rb, stream);
  } else if (v4) {
    launched = launch_kernel<true, kDimQKV4>(d, bf16, kind, map, use_tma, rb, stream);
  } else {
    launched = launch_kernel<true, kDimQK>(d, bf16, kind, map, use_tma, rb, stream);
  }
  MLAKIT_TRY(launched);
  return launch_combine(d, bf16, stream, true);
}

}  // namespace mlakit::cuda::decode::sm90
