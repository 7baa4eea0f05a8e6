#pragma once
// Host code shared by every CUDA decode path (sm80/, sm90/; dense and sparse): the checks they all make, the device
// facts they look up, the kernel parameters filled from a problem, and the plan launch. Each path's own
// host file adds only what differs: its tile shape, its occupancy and its kernel launch.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "cuda/common/device.h"
#include "cuda/decode/smxx/config.h"
#include "cuda/decode/smxx/params.h"
#include "mlakit/problems.h"

namespace mlakit::cuda::decode {

KvKind kv_kind(KvFormat f);
/// Query rows per request: s_q x h_q folded (row m = (i = m / h_q, h = m % h_q)).
int64_t query_rows(const DecodeProblem& p);

/// Checks every CUDA decode path makes (geometry, page sizes, q dtype against a 16-bit cache, 16-byte
/// alignment of rows, block_table and seq_lens on the device); `path` names the path in messages. `split`: whether
/// the path reads split caches (kv.k_pe).
Status check_decode_common(const DecodeProblem& p, const char* path, bool split);
/// The same for sparse decode, which every CUDA sparse path serves in both geometries (V3, and V4's with fp8_ds_v4
/// and the extra cache): any page size, indices, topk_length, attn_sink and max_logits on the device.
Status check_sparse_common(const SparseDecodeProblem& p, const char* path);
/// d_qk of the kernels that serve `dims`: kDimQK (V3) or kDimQKV4 (checked by check_sparse_common).
int kernel_dqk(const MlaDims& dims);
/// Plan requests of sparse decode: every query token (b, i) is one, b x s_q.
int64_t sparse_requests(const SparseDecodeProblem& p);

/// Facts of a device that cannot change while the process lives, looked up once per (host thread, device): plan and
/// run are called for every layer of every step, and the queries (device attributes, function attributes, occupancy)
/// cost the host several microseconds each.
struct DeviceFacts {
  const DeviceInfo* info = nullptr;  // cached_device_info's record of the device (stable for the thread's life); null:
                                     // not yet asked
  // Whether the Hopper decode's sm_90a image loads on the device (decode_sm90_available); false = not yet asked, or
  // the last asking failed (asked again then).
  bool sm90_loadable = false;
  // Portable kernel CTAs per SM [sparse][bf16][V4 geometry][KvKind][row groups 1, 2, 4]; 0 = not yet.
  int sm80_ctas[2][2][2][kNumKvKinds][3] = {};
  // The few-row kernels' CTAs per SM (sm80/few_rows.cuh) [sparse fp8_ds_v4, sparse fp8_ds_mla, dense fp8_ds_mla,
  // dense fp8_e4m3, sparse fp8_e4m3]; 0 = not yet, -1 = the kernel does not fit this device (the portable kernel serves
  // its calls).
  int sm80_few_rows_ctas[5] = {};
};
/// The facts of device `ordinal` (the call's tensors' device), kept per host thread like cached_device_info's. The
/// occupancy entries are filled on first use with that device current (the occupancy calculator asks the current one).
Status device_facts(int ordinal, DeviceFacts** out);

Status check_workspace_alignment(Workspace ws);
WorkspaceLayout layout_for(const DecodeProblem& p, int64_t partitions);
WorkspaceLayout layout_for(const SparseDecodeProblem& p, int64_t partitions);
/// The kernel parameters of `p`, with the plan and the partials at their places in `ws`.
DecodeParams make_params(const DecodeProblem& p, Workspace ws, int64_t partitions);
DecodeParams make_params(const SparseDecodeProblem& p, Workspace ws, int64_t partitions);
/// Launches the plan for kernels whose KV tiles hold 2^tile_shift tokens (sparse: index columns).
Status launch_plan_for(const DecodeProblem& p, Workspace ws, int64_t partitions, int tile_shift, cudaStream_t stream,
                       bool pdl);
Status launch_plan_for(const SparseDecodeProblem& p, Workspace ws, int64_t partitions, int tile_shift,
                       cudaStream_t stream, bool pdl);
/// Sparse decode's schedule and kernel parameters: when every request has the same number of index columns (no
/// topk_length, no extra_topk_length) and whole requests keep `partitions` CTAs within 5% as busy as an even split
/// would, the whole-request schedule (params.h: no plan kernel, no split, no combine; one launch instead of three);
/// else the device plan (launched here). `partitions` is the most the path's grid takes.
Status sparse_schedule(const SparseDecodeProblem& p, Workspace ws, int64_t partitions, int tile_shift,
                       cudaStream_t stream, bool pdl, DecodeParams* d);

}  // namespace mlakit::cuda::decode
