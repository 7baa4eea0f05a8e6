#pragma once
// Host-side launch description of the Hopper (sm_90a) decode kernel (dense and sparse). Defined in instantiations/ when the
// build has sm_90a code (MLAKIT_CUDA_ARCHS holds 90a), else in unavailable.cpp, which says so.

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "cuda/common/launch_sequence.h"
#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode::sm90 {

/// The launch of the kernel on a grid (row_blocks, p.partitions) of 384-thread CTAs (512 in CTA pairs over fp8
/// caches: config.h, kProducers) with ~227 KB of shared memory each (allowed here); dense decode, or sparse decode
/// with kSparse; a 16-bit cache (k16Bit) or an fp8 one, dequantised on chip. *use_tma (1 only for a dense 16-bit
/// cache: sparse rows are gathered one by one, fp8 rows go through the producer's registers) and the other
/// arguments must outlive the launch. kDqk: kDimQK, or kDimQKV4 for DeepSeek V4's geometry (sparse only).
template <bool kBf16, KvKind kKind, bool kSparse, int kDqk>
Status decode_kernel_launch(const DecodeParams& p, const CUtensorMap& kv_map, const int* use_tma, int row_blocks,
                            bool pdl, KernelLaunch* out);

/// The compiled (bf16?, kv kind, sparse?, d_qk) kernels, one instantiations/*.cu file each; unavailable.cpp stubs
/// the same list.
#define MLAKIT_DECODE_SM90_KERNELS(X)                                                                              \
  X(true, k16Bit, false, kDimQK) X(false, k16Bit, false, kDimQK) X(true, kE4M3, false, kDimQK)                       \
  X(false, kE4M3, false, kDimQK) X(true, kDsMla, false, kDimQK) X(false, kDsMla, false, kDimQK)                      \
  X(true, k16Bit, true, kDimQK) X(false, k16Bit, true, kDimQK) X(true, kE4M3, true, kDimQK)                          \
  X(false, kE4M3, true, kDimQK) X(true, kDsMla, true, kDimQK) X(false, kDsMla, true, kDimQK)                         \
  X(true, k16Bit, true, kDimQKV4) X(true, kE4M3, true, kDimQKV4) X(true, kDsV4, true, kDimQKV4)

/// Ok when this build holds the kernels' sm_90a code and the current device can run it.
Status kernels_loadable();

}  // namespace mlakit::cuda::decode::sm90
