#pragma once
// The parameters of both prefill kernel families (host and device), and the grid size of a launch.

#include <cstdint>

namespace mlakit::cuda::prefill {

struct PrefillParams {
  const uint8_t* q;  // [T_q, h, d_qk], 16-bit
  const uint8_t* k;  // [T_k, h, d_qk]
  const uint8_t* v;  // [T_k, h, d_v]
  uint8_t* out;      // [T_q, h, d_v]
  float* lse;        // [T_q, h] or null
  const int32_t* cu_q;
  const int32_t* cu_k;
  int64_t q_stride_t, q_stride_h;  // in elements
  int64_t k_stride_t, k_stride_h;
  int64_t v_stride_t, v_stride_h;
  int64_t out_stride_t, out_stride_h;
  int64_t lse_stride_t, lse_stride_h;
  int64_t cu_q_stride, cu_k_stride;
  int64_t t_q, t_k;  // total tokens
  int32_t batch;
  float scale_log2;  // softmax_scale * log2(e)
  bool causal;
};

/// The CTA slots of a launch whose blocks hold `rows_per_block` query rows.
inline int64_t grid_slots(int64_t t_q, int64_t batch, int64_t rows_per_block) { return t_q / rows_per_block + batch; }

}  // namespace mlakit::cuda::prefill
