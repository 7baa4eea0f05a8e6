#pragma once
// Thin wrappers over the PTX instructions the SM80+ kernels use: cp.async, ldmatrix, mma.sync,
// named barriers and programmatic dependent launch (PDL). Device code only.

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

namespace mlakit::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/// Brings the L2 line holding global address `p` into L2 (no destination, nothing to wait for). Per thread, unlike
/// cp.async.bulk.prefetch, whose operands ptxas makes warp-uniform with a loop over the lanes' addresses.
/// kEvictLast: the line is marked the last to evict (the dense fp8 rows' prefetch); otherwise normal priority (the
/// sparse rows', docs/performance.md, "The L2 flush's dirty lines").
template <bool kEvictLast>
__device__ __forceinline__ void prefetch_l2(const void* p) {
  if constexpr (kEvictLast) {
    asm volatile("prefetch.global.L2::evict_last [%0];\n" ::"l"(p));
  } else {
    asm volatile("prefetch.global.L2::evict_normal [%0];\n" ::"l"(p));
  }
}

/// An L2 policy that makes the lines a load brings in the first ones evicted: for data read once, such as a decode's
/// KV rows, so that streaming it through the L2 pushes out its own lines rather than the ones the L2 held before
/// (which, when dirty, would have to be written back to memory during the call).
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}

/// A 16-byte read-only global load under an L2 policy (l2_evict_first_policy).
__device__ __forceinline__ uint4 ldg128_hint(const void* p, uint64_t policy) {
  uint4 v;
  asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;\n"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "l"(policy));
  return v;
}

/// 16-byte asynchronous global -> shared copy; src_bytes = 0 zero-fills the destination (and reads
/// nothing), which is how rows past a request's length stay finite without touching poisoned memory.
__device__ __forceinline__ void cp_async_16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
/// cp_async_16 under an L2 policy (l2_evict_first_policy).
__device__ __forceinline__ void cp_async_16_hint(uint32_t dst, const void* src, int src_bytes, uint64_t policy) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(dst), "l"(src),
               "r"(src_bytes), "l"(policy)
               : "memory");
}
/// 8-byte asynchronous global -> shared copy (.ca: .cg takes 16 bytes only); src_bytes = 0 zero-fills, as above.
__device__ __forceinline__ void cp_async_8(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
/// 4-byte asynchronous global -> shared copy (.ca); src_bytes = 0 zero-fills, as above.
__device__ __forceinline__ void cp_async_4(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

/// Waits for every cp.async this thread issued, committed to a group or not.
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

/// D += A * B for one m16n8k16 tile, fp32 accumulation; kBf16 selects bf16 or fp16 operands.
template <bool kBf16>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

/// D += A * B for one m16n8k8 tile, fp32 accumulation (A: a0 = rows gid, a1 = rows gid + 8, k 2 tig .. 2 tig + 1;
/// B: k 2 tig .. 2 tig + 1 of column gid); kBf16 selects bf16 or fp16 operands.
template <bool kBf16>
__device__ __forceinline__ void mma_1688(float (&d)[4], const uint32_t (&a)[2], uint32_t b0) {
  if constexpr (kBf16) {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(b0));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, {%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(b0));
  }
}

/// Barrier over `threads` threads (a multiple of 32) with id 1..15 (0 is __syncthreads).
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// The same barrier without .aligned: threads may reach it from different code (and a warp need not be
/// converged), as the Hopper sparse consumers do (compute-sanitizer synccheck flags bar.sync there).
__device__ __forceinline__ void named_barrier_sync_unaligned(int id, int threads) {
  asm volatile("barrier.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

/// PDL: wait until the grids this one depends on have completed and their writes are visible.
/// A no-op below sm_90 (there the launch attribute is not set and stream order already holds).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
/// PDL: let the next grid in the stream start launching (it still waits in pdl_wait for our completion).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// ---- 16-bit packing ----
template <bool kBf16>
__device__ __forceinline__ uint32_t pack_float2(float lo, float hi) {
  if constexpr (kBf16) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
  }
}

/// The arithmetic form of e4m3x2_to_half2, which devices without cvt.f16x2.e4m3x2 (below sm_89) run; kept callable on
/// every device so that tests/gpu/test_dequant.cu checks it on the GPU it has. Moves each byte's exponent and mantissa
/// into fp16 position: S.EEEE.MMM -> S.0EEEE.MMM0000000, which is the e4m3 value times 2^-8 (bias 15 instead of 7) for
/// normals and subnormals alike; then multiplies by 2^8, exact in fp16. The NaN codes (0x7f, 0xff) would come out as
/// +-480, so their lanes are replaced by fp16 NaN with the code's sign.
__device__ __forceinline__ uint32_t e4m3x2_to_half2_arith(uint16_t v) {
  const uint32_t x = (uint32_t(v) & 0xffu) | ((uint32_t(v) & 0xff00u) << 8);
  uint32_t h = ((x & 0x00800080u) << 8) | ((x & 0x007f007fu) << 7);
  constexpr uint32_t kTwoPow8x2 = 0x5c005c00u;  // half2(256, 256)
  __half2 hv = __hmul2(*reinterpret_cast<__half2*>(&h), *reinterpret_cast<const __half2*>(&kTwoPow8x2));
  uint32_t r = *reinterpret_cast<uint32_t*>(&hv);
  if ((v & 0x7fu) == 0x7fu) r = (r & 0xffff0000u) | 0x7e00u | ((uint32_t(v) & 0x80u) << 8);
  if ((v & 0x7f00u) == 0x7f00u) r = (r & 0x0000ffffu) | 0x7e000000u | ((uint32_t(v) & 0x8000u) << 16);
  return r;
}

/// Two e4m3 bytes (low byte = element 0) -> half2 bits, exactly (every e4m3 value is an fp16 value; NaN codes give
/// fp16 NaN).
__device__ __forceinline__ uint32_t e4m3x2_to_half2(uint16_t v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint32_t r;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;\n" : "=r"(r) : "h"(v));
  return r;
#else
  return e4m3x2_to_half2_arith(v);
#endif
}

}  // namespace mlakit::cuda
