// Host helpers of the portable (SM80+) kernel family (host_sm80.h).

#include "cuda/decode/sm80/host_sm80.h"

#include <algorithm>
#include <string>

#include "cuda/decode/sm80/config.h"
#include "cuda/decode/sm80/few_rows_launch.h"
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

// ---- the few-row kernels (few_rows.cuh; issues 13, 9 and 8, docs/experiments/smxx-sparse-few-rows-study.md) ----
/// Whether a call goes to a few-row kernel: q bf16, at most 16 rows (heads) per query token, and either sparse decode
/// with DeepSeek V4's geometry and an fp8_ds_v4 cache or V3's with an fp8_ds_mla (V3.2) or fp8_e4m3 cache, or dense
/// decode with one query token per request and an fp8_ds_mla or fp8_e4m3 cache, where converting K in registers
/// straight into mma fragments beats the portable kernel's dequantised tile (H100, V4 b128 s_q 2 h16 top-k 128 + 512:
/// 0.0602 against 0.0883 ms; V3.2 b128 s_q 2 h16 top-k 2048: 0.1778 against 0.2240; dense fp8_ds_mla (128, 1, 32768,
/// 16): 1.2648 against 1.5975). Their plan, workspace and combine are the portable kernel's (tile shift 5).
bool use_few_rows(int64_t rows, const Sm80Variant& v) {
  if (!v.bf16 || rows > kRowsPerGroup) return false;
  if (!v.sparse) return v.one_token && (v.kind == KvKind::kDsMla || v.kind == KvKind::kE4M3);
  return v.v4 ? v.kind == KvKind::kDsV4 : v.kind == KvKind::kDsMla || v.kind == KvKind::kE4M3;
}

/// The few-row kernel of a variant use_few_rows takes (DeviceFacts' index too): 0 for sparse fp8_ds_v4, 1 for sparse
/// fp8_ds_mla, 2 for dense fp8_ds_mla, 3 for dense fp8_e4m3, 4 for sparse fp8_e4m3.
int few_rows_index(const Sm80Variant& v) {
  if (!v.sparse) return v.kind == KvKind::kE4M3 ? 3 : 2;
  return v.kind == KvKind::kDsV4 ? 0 : v.kind == KvKind::kE4M3 ? 4 : 1;
}

/// The few-row kernel of a variant use_few_rows takes, in few_rows_index's order.
const FewRowsKernel& few_rows_kernel(const Sm80Variant& v) {
  static const FewRowsKernel* const kKernels[] = {&kFewRowsDsV4, &kFewRowsDsMla, &kFewRowsDsMlaDense,
                                                  &kFewRowsE4m3Dense, &kFewRowsE4m3};
  return *kKernels[few_rows_index(v)];
}

/// The one place where a variant becomes template values: calls f.template operator()<kBf16, kKind, kSparse, kDqk>().
/// V4's geometry has instantiations for sparse decode with q in bf16 only (check_geometry refuses the rest).
template <typename F>
Status with_variant(const Sm80Variant& v, F&& f) {
  if (v.v4) {
    if (!v.sparse || !v.bf16) return Status::internal("decode: V4 geometry has sparse bf16 kernels only");
    switch (v.kind) {
      case KvKind::k16Bit: return f.template operator()<true, KvKind::k16Bit, true, kDimQKV4>();
      case KvKind::kE4M3: return f.template operator()<true, KvKind::kE4M3, true, kDimQKV4>();
      case KvKind::kDsV4: return f.template operator()<true, KvKind::kDsV4, true, kDimQKV4>();
      case KvKind::kDsMla: break;
    }
    return Status::internal("decode: fp8_ds_mla cannot hold V4 rows");
  }
  auto by_kind = [&]<bool kBf16, bool kSparse>() -> Status {
    switch (v.kind) {
      case KvKind::k16Bit: return f.template operator()<kBf16, KvKind::k16Bit, kSparse, kDimQK>();
      case KvKind::kE4M3: return f.template operator()<kBf16, KvKind::kE4M3, kSparse, kDimQK>();
      case KvKind::kDsMla: return f.template operator()<kBf16, KvKind::kDsMla, kSparse, kDimQK>();
      case KvKind::kDsV4: break;
    }
    return Status::internal("decode: fp8_ds_v4 holds V4 rows only");
  };
  if (v.sparse) {
    return v.bf16 ? by_kind.template operator()<true, true>() : by_kind.template operator()<false, true>();
  }
  return v.bf16 ? by_kind.template operator()<true, false>() : by_kind.template operator()<false, false>();
}

}  // namespace

bool sm80_takes_few_rows(int64_t rows, const Sm80Variant& v) { return use_few_rows(rows, v); }

Sm80Variant dense_variant(const DecodeProblem& p) {
  return {p.q.dtype == DType::kBF16, kv_kind(p.kv.format), /*sparse=*/false, /*v4=*/false,
          /*one_token=*/p.q.shape[1] == 1 && !p.kv.split()};
}

Status sm80_shape(int64_t rows, const Sm80Variant& v, int ordinal, Sm80Shape* out) {
  DeviceFacts* facts = nullptr;
  MLAKIT_TRY(device_facts(ordinal, &facts));
  Sm80Shape s;
  const bool takes_few_rows = use_few_rows(rows, v);
  int& few = facts->sm80_few_rows_ctas[few_rows_index(v)];  // 0: not asked yet; -1: does not fit this device
  if (takes_few_rows && few == 0) {
    const int limit = facts->info->max_smem_per_block_optin;
    DeviceGuard guard;  // the occupancy calculator answers for the current device
    MLAKIT_TRY(guard.set(Device::cuda(ordinal)));
    int n = 0;
    MLAKIT_TRY(few_rows_kernel(v).occupancy(limit, &n));
    few = n > 0 ? n : -1;
  }
  // One CTA per partition, all rows in it. A device whose blocks cannot hold the few-row kernel's shared memory (sm_86
  // and sm_89 allow 99 KB) takes the portable kernel below, which fits there.
  if (takes_few_rows && few > 0) {
    s.row_groups = 1;
    s.row_blocks = 1;
    s.partitions = int64_t(facts->info->num_sms) * few;
    s.pdl = facts->info->sm_major >= 9;
    s.few_rows = true;
    *out = s;
    return {};
  }
  s.row_groups = row_groups_for(rows);
  // The portable CTA's shared memory (config.h's smem_layout) is 112 - 160 KB past 16 rows, above the 99 KB a block
  // may have on sm_86, sm_89 and sm_120: declined there by name (supports() asks) instead of failing at launch. The
  // kernel's static shared memory (the plan's bounds) comes on top: 1 KB is kept for it.
  const int need = smem_layout(v.kind, s.row_groups, v.sparse, v.v4 ? kDimQKV4 : kDimQK).total + 1024;
  if (need > facts->info->max_smem_per_block_optin) {
    return Status::not_supported("query rows per request=" + std::to_string(rows) +
                                 ": the portable decode kernel needs " + std::to_string(need) +
                                 " bytes of shared memory per block for them, device " +
                                 std::to_string(facts->info->ordinal) + " allows " +
                                 std::to_string(facts->info->max_smem_per_block_optin));
  }
  const int64_t per_cta = int64_t(s.row_groups) * kRowsPerGroup;
  s.row_blocks = int((rows + per_cta - 1) / per_cta);
  int& ctas = facts->sm80_ctas[v.sparse ? 1 : 0][v.bf16 ? 1 : 0][v.v4 ? 1 : 0][int(v.kind)][row_group_index(s.row_groups)];
  if (ctas < 1) {
    const int rg = s.row_groups;
    DeviceGuard guard;  // the occupancy calculator answers for the current device
    MLAKIT_TRY(guard.set(Device::cuda(ordinal)));
    MLAKIT_TRY(with_variant(v, [&]<bool kBf16, KvKind kKind, bool kSparse, int kDqk>() {
      return decode_occupancy<kBf16, kKind, kSparse, kDqk>(rg, &ctas);
    }));
  }
  if (ctas < 1) return Status::internal("decode: the kernel does not fit on an SM of this device");
  s.partitions = std::max<int64_t>(1, int64_t(facts->info->num_sms) * ctas / s.row_blocks);
  s.pdl = facts->info->sm_major >= 9;  // griddepcontrol needs sm_90
  *out = s;
  return {};
}

Status launch_sm80(const DecodeParams& d, const Sm80Variant& v, const Sm80Shape& shape, cudaStream_t stream) {
  KernelLaunch launches[2];
  if (shape.few_rows) {
    MLAKIT_TRY(few_rows_kernel(v).launch(d, shape.pdl, &launches[0]));
  } else {
    MLAKIT_TRY(with_variant(v, [&]<bool kBf16, KvKind kKind, bool kSparse, int kDqk>() {
      return decode_kernel_launch<kBf16, kKind, kSparse, kDqk>(d, shape.row_groups, shape.row_blocks, shape.pdl,
                                                               &launches[0]);
    }));
  }
  // One sequence, so that an eager call replays kernel and combine as one graph (launch_sequence.h).
  const int n = combine_launch(d, v.bf16, shape.pdl, &launches[1]) ? 2 : 1;
  return launch_sequence(launches, n, stream);
}

}  // namespace mlakit::cuda::decode
