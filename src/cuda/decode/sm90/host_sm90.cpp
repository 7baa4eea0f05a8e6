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
Status kernel_launch(const DecodeParams& d, bool bf16, KvKind kind, const CUtensorMap& map, const int* tma, int rb,
                     KernelLaunch* out) {
  if constexpr (kDqk == kDimQKV4) {
    // V4's geometry (sparse only), q in bf16 like the portable path's V4 kernels (check_q_kv_out enforces both).
    if (!kSparse || !bf16) return Status::internal("decode: the Hopper V4 kernels are sparse with q in bf16");
    switch (kind) {
      case KvKind::k16Bit: return decode_kernel_launch<true, KvKind::k16Bit, kSparse, kDqk>(d, map, tma, rb, true, out);
      case KvKind::kE4M3: return decode_kernel_launch<true, KvKind::kE4M3, kSparse, kDqk>(d, map, tma, rb, true, out);
      case KvKind::kDsV4: return decode_kernel_launch<true, KvKind::kDsV4, kSparse, kDqk>(d, map, tma, rb, true, out);
      case KvKind::kDsMla: break;  // fp8_ds_mla holds V3 rows only (validation)
    }
  } else {
    switch (kind) {
      case KvKind::k16Bit:
        return bf16 ? decode_kernel_launch<true, KvKind::k16Bit, kSparse, kDqk>(d, map, tma, rb, true, out)
                    : decode_kernel_launch<false, KvKind::k16Bit, kSparse, kDqk>(d, map, tma, rb, true, out);
      case KvKind::kE4M3:
        return bf16 ? decode_kernel_launch<true, KvKind::kE4M3, kSparse, kDqk>(d, map, tma, rb, true, out)
                    : decode_kernel_launch<false, KvKind::kE4M3, kSparse, kDqk>(d, map, tma, rb, true, out);
      case KvKind::kDsMla:
        return bf16 ? decode_kernel_launch<true, KvKind::kDsMla, kSparse, kDqk>(d, map, tma, rb, true, out)
                    : decode_kernel_launch<false, KvKind::kDsMla, kSparse, kDqk>(d, map, tma, rb, true, out);
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
  const int tma = use_tma && !sparse && kind == KvKind::k16Bit ? 1 : 0;  // only dense 16-bit tiles come by TMA
  KernelLaunch launches[2];
  if (!sparse) {
    MLAKIT_TRY((kernel_launch<false, kDimQK>(d, bf16, kind, map, &tma, rb, &launches[0])));
  } else if (v4) {
    MLAKIT_TRY((kernel_launch<true, kDimQKV4>(d, bf16, kind, map, &tma, rb, &launches[0])));
  } else {
    MLAKIT_TRY((kernel_launch<true, kDimQK>(d, bf16, kind, map, &tma, rb, &launches[0])));
  }
  // One sequence, so that an eager call replays both as one graph (launch_sequence.h).
  const int n = combine_launch(d, bf16, true, &launches[1]) ? 2 : 1;
  return launch_sequence(launches, n, stream);
}

}  // namespace mlakit::cuda::decode::sm90
