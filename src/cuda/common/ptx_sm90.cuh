#pragma once
// Thin wrappers over the Hopper (sm_90a) PTX instructions of the Hopper kernels: mbarriers, bulk tensor
// copies (TMA), cluster rank and barrier with copies and arrivals into a peer CTA's shared memory, warpgroup MMA
// (wgmma) with its shared-memory matrix descriptors, register reallocation (setmaxnreg) and the proxy fence. Device code only; include it only from code compiled for sm_90a.
// Raw PTX rather than CuTe: the kernels need six instructions and two shared-memory layouts, and one
// header of wrappers (each exercised by tests/gpu/test_ptx_sm90.cu) is easier to audit than a template
// library pinned into the build (docs/design.md).

#include <cuda.h>  // CUtensorMap (a plain struct; nothing of the driver library is linked)

#include <cstdint>
#include <cstdio>

namespace mlakit::cuda {

// ---- mbarrier (shared-memory barrier objects with a phase bit and a transaction count) ----

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(arrivals) : "memory");
}
/// Makes barrier initialisation visible to the asynchronous proxy (the copy engine) before first use.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/// Arrives and adds `bytes` to the transaction count the current phase waits for (TMA completes them).
__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
/// Arrives on `bar` once every cp.async this thread issued before has landed (counts as one arrival).
__device__ __forceinline__ void mbar_arrive_on_cp_async(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(bar) : "memory");
}
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}\n"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}
/// Waits until the phase with the given parity has completed. Built with MLAKIT_DEBUG_HANGS, a wait that
/// never ends prints the barrier and traps instead of hanging the GPU (for debugging a pipeline).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
#ifdef MLAKIT_DEBUG_HANGS
  for (uint64_t spins = 0; !mbar_try_wait(bar, parity); ++spins) {
    if (spins == (uint64_t(1) << 24)) {
      printf("mbar_wait: no progress: block (%d, %d) thread %d barrier 0x%x parity %u\n", int(blockIdx.x),
             int(blockIdx.y), int(threadIdx.x), bar, parity);
      __trap();
    }
  }
#else
  while (!mbar_try_wait(bar, parity)) {
  }
#endif
}

// ---- thread block clusters: two CTAs of a request sharing converted KV tiles (docs/design.md) ----

/// This CTA's rank in its cluster, and the cluster's size (1 when launched without cluster dimensions).
__device__ __forceinline__ uint32_t cluster_ctarank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_nctarank() {
  uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;\n" : "=r"(n));
  return n;
}
/// Every thread of every CTA of the cluster, converged (.aligned): what each did before (barrier initialisation,
/// its last accesses to a peer's shared memory) is visible to, and complete for, all after it.
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/// Arrives on the barrier at shared-memory address `bar` (this CTA's window) of CTA `cta_rank` of the cluster. The
/// default (CTA-scope) semantics, as CUTLASS's cluster pipelines release a stage: what it signals is that this
/// warp's wgmma reads of the stage are complete (wgmma.wait_group), which needs no memory fence; `.release.cluster`
/// puts a MEMBAR.ALL.GPU before every arrival (seen in the SASS of an earlier experiment).
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta_rank) {
  asm volatile(
      "{\n .reg .b32 remote;\n mapa.shared::cluster.u32 remote, %0, %1;\n"
      " mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n" ::"r"(bar),
      "r"(cta_rank)
      : "memory");
}
/// Copies `bytes` (a multiple of 16, both addresses 16-byte aligned) from this CTA's shared memory at `src` to the
/// same-layout shared memory of CTA `cta_rank` at `dst` (an address in this CTA's window, mapped to the peer's), and
/// completes them on the peer's barrier at `bar` (likewise mapped): the bytes count against the transaction count
/// the peer's current phase expects. The copy reads `src` through the asynchronous proxy, so ordinary stores to it
/// must be ordered before by fence_proxy_async() (and, from other threads, a barrier).
__device__ __forceinline__ void bulk_copy_to_peer(uint32_t dst, uint32_t src, uint32_t bytes, uint32_t bar,
                                                  uint32_t cta_rank) {
  asm volatile(
      "{\n .reg .b32 rdst, rbar;\n mapa.shared::cluster.u32 rdst, %0, %3;\n mapa.shared::cluster.u32 rbar, %2, %3;\n"
      " cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [rdst], [%1], %4, [rbar];\n}\n" ::"r"(dst),
      "r"(src), "r"(bar), "r"(cta_rank), "r"(bytes)
      : "memory");
}

// ---- fences, register reallocation ----

/// Orders this thread's ordinary shared-memory writes before later reads by the asynchronous proxy
/// (wgmma operands, TMA stores).
__device__ __forceinline__ void fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}
template <int kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kRegs));
}

// ---- TMA: bulk tensor copy global -> shared, completing on an mbarrier ----

__device__ __forceinline__ void tma_prefetch_descriptor(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}
/// Copies the box at coordinates (c0, c1, c2) (innermost first) of a rank-3 tensor map to `dst`.
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0, int32_t c1,
                                            int32_t c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4, %5}], [%2];\n" ::
          "r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

/// tma_load_3d under an L2 policy (l2_evict_first_policy in ptx.cuh).
__device__ __forceinline__ void tma_load_3d_hint(uint32_t dst, const CUtensorMap* map, uint32_t bar, int32_t c0,
                                                 int32_t c1, int32_t c2, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1, {%3, %4, "
      "%5}], [%2], %6;\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "l"(policy)
      : "memory");
}

/// Asks the memory system to bring `bytes` (a multiple of 16, from a 16-byte aligned address) into L2, with no
/// destination and no completion to wait for: the fp8 producer warms the rows of its next tile this way.
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(src), "r"(bytes) : "memory");
}

// ---- wgmma ----
// Shared-memory operands use the 128-byte swizzle: rows of 128 bytes (64 16-bit values), 8 rows per
// 1024-byte atom, the 16-byte piece j of row r stored at piece j ^ (r % 8). Every atom is 1024-byte aligned.

/// Byte offset of the 16-byte piece `piece` (0..7) of row `row` inside a 128-byte-swizzled block.
__host__ __device__ constexpr uint32_t swizzle128(uint32_t row, uint32_t piece) {
  return row * 128u + ((piece ^ (row % 8u)) * 16u);
}

/// Matrix descriptor of a 128-byte-swizzled operand. K-major (rows of K): lbo unused, sbo = 1024 (the
/// 8-row atom). MN-major (rows of K, 64 MN values each): lbo = bytes between 64-value MN blocks,
/// sbo = bytes between 8-row K groups.
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t smem_addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
  uint64_t d = 0;
  d |= uint64_t((smem_addr & 0x3FFFFu) >> 4);
  d |= uint64_t((lbo_bytes >> 4) & 0x3FFFu) << 16;
  d |= uint64_t((sbo_bytes >> 4) & 0x3FFFu) << 32;
  d |= uint64_t(1) << 62;  // 128-byte swizzle
  return d;
}

/// The descriptor of the operand `bytes` past the one `desc` describes (same strides and swizzle): the address field
/// holds address / 16 in 14 bits, and shared memory (at most 228 KB) keeps the sum below 2^14, so no carry leaves it.
__device__ __forceinline__ uint64_t desc_plus(uint64_t desc, uint32_t bytes) { return desc + (bytes >> 4); }

/// Before the first wgmma of a batch: orders earlier register writes (accumulators, A fragments).
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
/// Waits until at most kPending committed groups of this warpgroup are still in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
}
/// Keeps the compiler from moving accesses of `r` across a wgmma issue or wait.
template <int kN>
__device__ __forceinline__ void fence_registers(float (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int kN>
__device__ __forceinline__ void fence_registers(uint32_t (&r)[kN]) {
#pragma unroll
  for (int i = 0; i < kN; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#define MLAKIT_WGMMA_D32_REGS \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31 "

#define MLAKIT_WGMMA_D32_OPERANDS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
  "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), \
  "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), \
  "+f"(d[29]), "+f"(d[30]), "+f"(d[31])

#define MLAKIT_WGMMA_D128_REGS \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, " \
  "%21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, " \
  "%40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, " \
  "%59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, " \
  "%78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, " \
  "%97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, " \
  "%113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127 "

#define MLAKIT_WGMMA_D128_OPERANDS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), \
  "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), \
  "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), \
  "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), \
  "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), \
  "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), \
  "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
  "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), \
  "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), \
  "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), \
  "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), \
  "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), \
  "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), \
  "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), \
  "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), \
  "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
  "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), \
  "+f"(d[127])


#define MLAKIT_WGMMA_D64_REGS \
  "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
  "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, " \
  "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63 "

#define MLAKIT_WGMMA_D64_OPERANDS(d) \
  "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
  "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), \
  "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), \
  "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), \
  "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), \
  "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
  "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), \
  "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])

// D (64 x 64, fp32) (+)= A (64 x 16, smem, K-major) * B (16 x 64, smem, K-major). scale_d = 0 overwrites D.
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (kBf16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {" MLAKIT_WGMMA_D32_REGS "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : MLAKIT_WGMMA_D32_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {" MLAKIT_WGMMA_D32_REGS "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : MLAKIT_WGMMA_D32_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
}

// D (64 x 128, fp32) (+)= A (64 x 16, smem, K-major) * B (16 x 128, smem, K-major). scale_d = 0 overwrites D: the
// Hopper prefill's Q K^T over 128-key tiles.
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n128k16_ss(float (&d)[64], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  if constexpr (kBf16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" MLAKIT_WGMMA_D64_REGS "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : MLAKIT_WGMMA_D64_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" MLAKIT_WGMMA_D64_REGS "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        : MLAKIT_WGMMA_D64_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
  }
}

// D (64 x 256, fp32) += A (64 x 16, smem, K-major) * B (16 x 256, smem, MN-major).
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n256k16_ss_tb(float (&d)[128], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (kBf16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" MLAKIT_WGMMA_D128_REGS "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
        : MLAKIT_WGMMA_D128_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(1));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" MLAKIT_WGMMA_D128_REGS "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
        : MLAKIT_WGMMA_D128_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(1));
  }
}

// D (64 x 128, fp32) += A (64 x 16, smem, K-major) * B (16 x 128, smem, MN-major): half of the m64n256 form, for
// kernels of 512 threads, whose 128 registers per thread at launch no m64n256 instruction fits in (ptxas C7602).
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n128k16_ss_tb(float (&d)[64], uint64_t desc_a, uint64_t desc_b) {
  if constexpr (kBf16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" MLAKIT_WGMMA_D64_REGS "}, %64, %65, p, 1, 1, 0, 1;\n}\n"
        : MLAKIT_WGMMA_D64_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(1));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" MLAKIT_WGMMA_D64_REGS "}, %64, %65, p, 1, 1, 0, 1;\n}\n"
        : MLAKIT_WGMMA_D64_OPERANDS(d)
        : "l"(desc_a), "l"(desc_b), "r"(1));
  }
}

// D (64 x 256, fp32) += A (64 x 16, registers: the m16n8k16 A fragment of each warp's 16 rows) *
// B (16 x 256, smem, MN-major).
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n256k16_rs_tb(float (&d)[128], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kBf16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {" MLAKIT_WGMMA_D128_REGS
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : MLAKIT_WGMMA_D128_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %133, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {" MLAKIT_WGMMA_D128_REGS
        "}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
        : MLAKIT_WGMMA_D128_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
  }
}

// D (64 x 128, fp32) += A (64 x 16, registers: the m16n8k16 A fragment of each warp's 16 rows) *
// B (16 x 128, smem, MN-major): the P V of the Hopper prefill (d_v = 128).
template <bool kBf16>
__device__ __forceinline__ void wgmma_m64n128k16_rs_tb(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b) {
  if constexpr (kBf16) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {" MLAKIT_WGMMA_D64_REGS
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : MLAKIT_WGMMA_D64_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
  } else {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {" MLAKIT_WGMMA_D64_REGS
        "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
        : MLAKIT_WGMMA_D64_OPERANDS(d)
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(1));
  }
}

#undef MLAKIT_WGMMA_D64_REGS
#undef MLAKIT_WGMMA_D64_OPERANDS
#undef MLAKIT_WGMMA_D32_REGS
#undef MLAKIT_WGMMA_D32_OPERANDS
#undef MLAKIT_WGMMA_D128_REGS
#undef MLAKIT_WGMMA_D128_OPERANDS

}  // namespace mlakit::cuda
