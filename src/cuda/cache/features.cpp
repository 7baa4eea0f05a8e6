// What the cuda backend's cache operations implement (drives `mlakit info` and docs/backends.md).

#include "cuda/ops.h"

namespace mlakit::cuda {

std::vector<Feature> cache_features() {
  return {
      {OpKind::kAppendKv,
       "kv=bf16,fp16,fp8_e4m3 (scale from device pointer or value),fp8_ds_mla,fp8_ds_v4 (power-of-two scales in "
       "kernel); "
       "kv_c/k_pe=bf16,fp16,fp32; d_c multiple of 8; P=1,2,4,..,256; bytes equal the reference; fused RoPE "
       "interleaved|neox on k_pe and q_pe, q -> fp8 e4m3; device-side guards: slot < 0 or >= num_pages*P "
       "skips the token, a position outside [0, max_pos) skips its cache write and q RoPE (q_fp8 still "
       "written); duplicate slots race"},
      {OpKind::kRope, "bf16,fp16,fp32 x; interleaved|neox; positions outside [0, max_pos) leave the token as is"},
      {OpKind::kGatherKv,
       "all formats (fp8_ds_v4 included) -> bf16, bits equal the reference (an e4m3 NaN code gives a NaN of another payload); "
       "d_qk multiple of 8; P=1,2,4,..,256; rows outside every request, or with a page id outside [0, num_pages), are not "
       "written"},
      {OpKind::kMerge,
       "2-way and N-way; in place or out of place; parts and out fp32,bf16,fp16; d multiple of 4; -inf rows "
       "give O=0, L=-inf; double accumulation"},
  };
}

}  // namespace mlakit::cuda
