#pragma once
// Host helpers of the portable (SM80+) kernel family that its dense and sparse entry points share: the CTA
// shape for a number of query rows, the partition count from the kernel's occupancy, and the launch of the
// kernel (the one place where runtime values become its template values) followed by the combine.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"
#include "mlakit/problems.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode {

/// Which instantiation of the decode kernel a call needs: q's dtype, the KV kind, dense or sparse, and the geometry
/// (V4: d_qk 512, sparse only).
struct Sm80Variant {
  bool bf16 = true;
  KvKind kind = KvKind::k16Bit;
  bool sparse = false;
  bool v4 = false;
  // Dense decode whose requests have one query token and one cache tensor (no split k_pe): a request's rows are then
  // the heads of one token, as in sparse decode, which the few-row kernel needs (host_sm80.cpp, use_few_rows).
  bool one_token = false;
};

struct Sm80Shape {
  int row_groups = 0;      // groups of 16 query rows per CTA: 1, 2 or 4
  int row_blocks = 0;      // CTAs per request along the rows
  int64_t partitions = 0;  // G: CTA columns, one full wave of the kernel
  bool pdl = false;        // programmatic dependent launch (sm_90+)
  bool few_rows = false;   // the few-row kernel (few_rows.cuh) instead of the portable one (host_sm80.cpp)
};

/// The shape for `rows` query rows per request (dense: s_q x h_q; sparse: h_q) on device `ordinal`.
Status sm80_shape(int64_t rows, const Sm80Variant& v, int ordinal, Sm80Shape* out);

/// Whether sm80_shape gives a call the few-row kernel (few_rows.cuh) on a device where it fits: q bf16, at most 16 rows
/// (heads) per query token, and sparse fp8_ds_v4 (V4) or fp8_ds_mla or fp8_e4m3 (V3), or dense fp8_ds_mla or fp8_e4m3
/// with one query token and one cache tensor. The rule alone, for its tests.
bool sm80_takes_few_rows(int64_t rows, const Sm80Variant& v);

/// The variant of a dense decode problem (decode_sm80.cpp's entry points take it).
Sm80Variant dense_variant(const DecodeProblem& p);

/// Launches the decode kernel (dense or sparse) and then the combine of the split requests.
Status launch_sm80(const DecodeParams& d, const Sm80Variant& v, const Sm80Shape& shape, cudaStream_t stream);

}  // namespace mlakit::cuda::decode
