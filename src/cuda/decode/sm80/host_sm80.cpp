// Host helpers of the portable (SM80+) kernel family (host_sm80.h).

#include "cuda/decode/sm80/host_sm80.h"

#include <algorithm>
#include <string>

#include "cuda/decode/sm80/config.h"
#include "cuda/decode/sm80/launch.h"
#include "cuda/decode/smxx/host.h"
#include "cuda/decode/smxx/launch.h"

namespace mlakit::cuda::decode {
namespace {

/// Row groups of 16 query rows per CTA: 1 for <= 16 rows, 2 for <= 32, else 4 (64 rows per CTA:
/// 128 heads x s_q = 1 gives 2 row blocks per request).
int row_groups_for(int64_t rows) {
  if (rows <= kRowsPerGroup) return 1;
  if (rows <= 2 * kRowsPerGroup) return 2;
  return kMaxRowGroups;
}

int row_group_index(int row_groups) { return row_groups == 1 ? 0 : row_groups == 2 ? 1 : 2; }

template <bool kSparse>
Status occupancy(bool bf16, KvKind kind, int row_groups, int* ctas) {
  switch (kind) {
    case KvKind::k16Bit:
      return bf16 ? decode_occupancy<true, KvKind::k16Bit, kSparse>(row_groups, ctas)
                  : decode_occupancy<false, KvKind::k16Bit, kSparse>(row_groups, ctas);
    case KvKind::kE4M3:
      return bf16 ? decode_occupancy<true, KvKind::kE4M3, kSparse>(row_groups, ctas)
                  : decode_occupancy<false, KvKind::kE4M3, kSparse>(row_groups, ctas);
    case KvKind::kDsMla:
      return bf16 ? decode_occupancy<true, KvKind::kDsMla, kSparse>(row_groups, ctas)
                  : decode_occupancy<false, KvKind::kDsMla, kSparse>(row_groups, ctas);
  }
  return Status::internal("decode: unknown kv kind");
}

template <bool kSparse>
Status launch_kernel(const DecodeParams& d, bool bf16, KvKind kind, const Sm80Shape& s, cudaStream_t stream) {
  const int rg = s.row_groups, rb = s.row_blocks;
  switch (kind) {
    case KvKind::k16Bit:
      return bf16 ? launch_decode_kernel<true, KvKind::k16Bit, kSparse>(d, rg, rb, stream, s.pdl)
                  : launch_decode_kernel<false, KvKind::k16Bit, kSparse>(d, rg, rb, stream, s.pdl);
    case KvKind::kE4M3:
      return bf16 ? launch_decode_kernel<true, KvKind::kE4M3, kSparse>(d, rg, rb, stream, s.pdl)
                  : launch_decode_kernel<false, KvKind::kE4M3, kSparse>(d, rg, rb, stream, s.pdl);
    case KvKind::kDsMla:
      return bf16 ? launch_decode_kernel<true, KvKind::kDsMla, kSparse>(d, rg, rb, stream, s.pdl)
                  : launch_decode_kernel<false, KvKind::kDsMla, kSparse>(d, rg, rb, stream, s.pdl);
  }
  return Status::internal("decode: unknown kv kind");
}

}  // namespace

Status sm80_shape(int64_t rows, bool bf16, KvKind kind, bool sparse, Sm80Shape* out) {
  DeviceFacts* facts = nullptr;
  MLAKIT_TRY(device_facts(&facts));
  Sm80Shape s;
  s.row_groups = row_groups_for(rows);
  const int64_t per_cta = int64_t(s.row_groups) * kRowsPerGroup;
  s.row_blocks = int((rows + per_cta - 1) / per_cta);
  int& ctas = facts->sm80_ctas[sparse ? 1 : 0][bf16 ? 1 : 0][int(kind)][row_group_index(s.row_groups)];
  if (ctas < 1) {
    MLAKIT_TRY(sparse ? occupancy<true>(bf16, kind, s.row_groups, &ctas)
                      : occupancy<false>(bf16, kind, s.row_groups, &ctas));
  }
  if (ctas < 1) return Status::internal("decode: the kernel does not fit on an SM of this device");
  s.partitions = std::max<int64_t>(1, int64_t(facts->info.num_sms) * ctas / s.row_blocks);
  s.pdl = facts->info.sm_major >= 9;  // griddepcontrol needs sm_90
  *out = s;
  return {};
}

Status launch_sm80(const DecodeParams& d, bool bf16, KvKind kind, bool sparse, const Sm80Shape& shape,
                   cudaStream_t stream) {
  MLAKIT_TRY(sparse ? launch_kernel<true>(d, bf16, kind, shape, stream)
                    : launch_kernel<false>(d, bf16, kind, shape, stream));
  return launch_combine(d, bf16, stream, shape.pdl);
}

}  // namespace mlakit::cuda::decode
