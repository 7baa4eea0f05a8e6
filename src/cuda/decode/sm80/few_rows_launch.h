#pragma once
// Host-side launchers of the few-row decode kernels (few_rows.cuh: q bf16, h_q <= 16, sm_80+; sparse: fp8_ds_v4 in V4's
// geometry, fp8_ds_mla and fp8_e4m3 in V3's; dense with one query token: fp8_ds_mla, fp8_e4m3) and their occupancy
// queries. Chosen by host_sm80.cpp (use_few_rows) only; the portable kernel stays the default elsewhere.

#include <cuda_runtime_api.h>

#include "cuda/decode/smxx/params.h"
#include "mlakit/status.h"

namespace mlakit::cuda::decode {

/// Launches decode_few_rows_dsv4 on a grid of (1, p.partitions) CTAs of 256 threads (p.rows <= 16, sparse plan).
Status launch_few_rows_dsv4(const DecodeParams& p, cudaStream_t stream, bool pdl);

/// CTAs of decode_few_rows_dsv4 that fit on one SM (from the CUDA occupancy calculator); 0 when it needs more shared
/// memory per block than max_smem_per_block (the device's opt-in limit: 99 KB on sm_86 and sm_89).
Status few_rows_dsv4_occupancy(int max_smem_per_block, int* ctas_per_sm);

/// Launches decode_few_rows_dsmla (V3 geometry, fp8_ds_mla) on a grid of (1, p.partitions) CTAs of 256 threads.
Status launch_few_rows_dsmla(const DecodeParams& p, cudaStream_t stream, bool pdl);

/// CTAs of decode_few_rows_dsmla that fit on one SM, as few_rows_dsv4_occupancy.
Status few_rows_dsmla_occupancy(int max_smem_per_block, int* ctas_per_sm);

/// Launches decode_few_rows_e4m3 (V3 geometry, fp8_e4m3) as launch_few_rows_dsmla.
Status launch_few_rows_e4m3(const DecodeParams& p, cudaStream_t stream, bool pdl);

/// CTAs of decode_few_rows_e4m3 that fit on one SM, as few_rows_dsv4_occupancy.
Status few_rows_e4m3_occupancy(int max_smem_per_block, int* ctas_per_sm);

/// Launches decode_few_rows_dsmla_dense (dense decode, one query token per request, V3 geometry, fp8_ds_mla, rows from
/// the block table) on a grid of (1, p.partitions) CTAs of 256 threads (p.rows = h_q <= 16, dense plan).
Status launch_few_rows_dsmla_dense(const DecodeParams& p, cudaStream_t stream, bool pdl);

/// CTAs of decode_few_rows_dsmla_dense that fit on one SM, as few_rows_dsv4_occupancy.
Status few_rows_dsmla_dense_occupancy(int max_smem_per_block, int* ctas_per_sm);

/// Launches decode_few_rows_e4m3_dense (dense decode, one query token per request, V3 geometry, fp8_e4m3) as
/// launch_few_rows_dsmla_dense.
Status launch_few_rows_e4m3_dense(const DecodeParams& p, cudaStream_t stream, bool pdl);

/// CTAs of decode_few_rows_e4m3_dense that fit on one SM, as few_rows_dsv4_occupancy.
Status few_rows_e4m3_dense_occupancy(int max_smem_per_block, int* ctas_per_sm);

}  // namespace mlakit::cuda::decode
