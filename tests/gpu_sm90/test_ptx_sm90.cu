// One test per wrapper of src/cuda/common/ptx_sm90.cuh, against plain host loops: the 128-byte swizzle
// and the wgmma descriptors (K-major Q.K^T-like products, MN-major P.V-like products with P from shared
// memory and from registers), the accumulator layout, TMA boxes of a paged cache (through the project's
// own tensor-map encoder) completing on an mbarrier, cp.async completing on an mbarrier, the L2 bulk
// prefetch, and a CTA pair exchanging halves of a buffer (cluster rank, bulk copy into the peer's shared memory
// completing on its barrier, arrivals on the peer's barriers, the cluster barrier).
// Compiled for sm_90a only; skipped on other devices.

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/common/ptx.cuh"
#include "cuda/common/ptx_sm90.cuh"
#include "cuda/decode/sm90/tensor_map.h"
#include "mlakit/numeric.h"
#include "mlakit/problems.h"

namespace mlakit::cuda {
namespace {

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

bool is_hopper() {
  int n = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return false;
  cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
  cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
  return major == 9 && minor == 0;
}
#define SKIP_UNLESS_HOPPER() \
  if (!is_hopper()) GTEST_SKIP() << "needs an sm_90 device"

constexpr int kChunk = 8192;  // 64 rows x 128 bytes

__device__ uint8_t* aligned_smem(uint8_t* raw) {
  const uint32_t a = smem_addr(raw);
  return raw + (1024u - a % 1024u) % 1024u;
}

/// Stores rows x (chunks x 64) 16-bit values from global (row-major, `ld` values per row) into `chunks`
/// swizzled blocks `chunk_bytes` apart (rows <= chunk_bytes / 128).
__device__ void to_swizzled(const uint16_t* src, int rows, int chunks, int ld, uint8_t* dst, int chunk_bytes = kChunk) {
  for (int idx = threadIdx.x; idx < rows * chunks * 8; idx += blockDim.x) {
    const int row = idx / (chunks * 8);
    const int c = (idx / 8) % chunks;
    const int piece = idx % 8;
    *reinterpret_cast<uint4*>(dst + c * chunk_bytes + swizzle128(row, piece)) =
        *reinterpret_cast<const uint4*>(src + row * ld + c * 64 + piece * 8);
  }
}

/// Row and column of accumulator element i of this thread (wgmma m64nNk16, fp32).
__device__ void acc_pos(int i, int* row, int* col) {
  const int t = threadIdx.x % 128, lane = t % 32;
  *row = (t / 32) * 16 + lane / 4 + 8 * ((i >> 1) & 1);
  *col = 8 * (i / 4) + 2 * (lane % 4) + (i & 1);
}

// D[64 x kN] = A[64 x 128] B[kN x 128]^T, both K-major over two chunks (eight k-steps; a B chunk holds kN rows):
// kN = 64 is the decode's Q K^T (m64n64k16), kN = 128 the Hopper prefill's (m64n128k16).
template <int kN>
__global__ void qk_kernel(const uint16_t* a, const uint16_t* b, float* d) {
  constexpr int kBChunk = kN / 64 * kChunk;
  extern __shared__ uint8_t raw[];
  uint8_t* sm = aligned_smem(raw);
  to_swizzled(a, 64, 2, 128, sm);
  to_swizzled(b, kN, 2, 128, sm + 2 * kChunk, kBChunk);
  fence_proxy_async();
  __syncthreads();
  const uint32_t sa = smem_addr(sm), sb = sa + 2 * kChunk;
  float acc[kN / 2];
  wgmma_fence();
  for (int c = 0; c < 2; ++c)
    for (int kk = 0; kk < 4; ++kk) {
      const uint64_t da = wgmma_desc(sa + c * kChunk + kk * 32, 16, 1024);
      const uint64_t db = wgmma_desc(sb + c * kBChunk + kk * 32, 16, 1024);
      if constexpr (kN == 64) {
        wgmma_m64n64k16_ss<true>(acc, da, db, c + kk);
      } else {
        wgmma_m64n128k16_ss<true>(acc, da, db, c + kk);
      }
    }
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(acc);
  for (int i = 0; i < kN / 2; ++i) {
    int r, col;
    acc_pos(i, &r, &col);
    d[r * kN + col] = acc[i];
  }
}

// D[64 x kN] = P[64 x 64] V[64 x kN]; P K-major (one chunk) from shared memory or registers, V MN-major
// (token rows of 64 values per chunk, kN / 64 chunks). kN = 128: the prefill's P V (P from registers) and the halves of
// the decode kernels with two producers (both forms).
template <int kN, bool kPRegisters>
__global__ void pv_kernel(const uint16_t* p, const uint16_t* v, float* d) {
  extern __shared__ uint8_t raw[];
  uint8_t* sm = aligned_smem(raw);
  to_swizzled(p, 64, 1, 64, sm);
  to_swizzled(v, 64, kN / 64, kN, sm + kChunk);
  fence_proxy_async();
  __syncthreads();
  const uint32_t sp = smem_addr(sm), sv = sp + kChunk;
  const int t = threadIdx.x, lane = t % 32, r0 = (t / 32) * 16 + lane / 4, tig = lane % 4;
  uint32_t a[4][4];
  for (int kk = 0; kk < 4; ++kk) {  // the m16n8k16 A fragment of rows r0, r0 + 8
    auto pair = [&](int r, int k) { return uint32_t(p[r * 64 + k]) | (uint32_t(p[r * 64 + k + 1]) << 16); };
    a[kk][0] = pair(r0, 16 * kk + 2 * tig);
    a[kk][1] = pair(r0 + 8, 16 * kk + 2 * tig);
    a[kk][2] = pair(r0, 16 * kk + 8 + 2 * tig);
    a[kk][3] = pair(r0 + 8, 16 * kk + 8 + 2 * tig);
  }
  float acc[kN / 2];
  for (int i = 0; i < kN / 2; ++i) acc[i] = 0.0f;
  wgmma_fence();
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t bv = wgmma_desc(sv + kk * 16 * 128, kChunk, 1024);
    if constexpr (kN == 128 && kPRegisters) {
      wgmma_m64n128k16_rs_tb<true>(acc, a[kk], bv);
    } else if constexpr (kN == 128) {
      wgmma_m64n128k16_ss_tb<true>(acc, wgmma_desc(sp + kk * 32, 16, 1024), bv);
    } else if constexpr (kPRegisters) {
      wgmma_m64n256k16_rs_tb<true>(acc, a[kk], bv);
    } else {
      wgmma_m64n256k16_ss_tb<true>(acc, wgmma_desc(sp + kk * 32, 16, 1024), bv);
    }
  }
  wgmma_commit();
  wgmma_wait<0>();
  fence_registers(acc);
  for (int i = 0; i < kN / 2; ++i) {
    int r, col;
    acc_pos(i, &r, &col);
    d[r * kN + col] = acc[i];
  }
}

// Copies `chunks` boxes (64 values x box_rows rows) at (64 c, row, page) of the tensor map into swizzled
// shared memory through TMA, then every thread reads them back into out[box_rows][64 chunks].
__global__ void tma_kernel(const __grid_constant__ CUtensorMap map, int row, int page, int box_rows, int chunks,
                           uint16_t* out) {
  extern __shared__ uint8_t raw[];
  uint8_t* sm = aligned_smem(raw);
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = smem_addr(&bar);
  if (threadIdx.x == 0) {
    mbar_init(b, 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    mbar_arrive_expect_tx(b, uint32_t(chunks * box_rows * 128));
    for (int c = 0; c < chunks; ++c) tma_load_3d(smem_addr(sm) + c * kChunk, &map, b, c * 64, row, page);
  }
  mbar_wait(b, 0);
  for (int idx = threadIdx.x; idx < box_rows * chunks * 64; idx += blockDim.x) {
    const int r = idx / (chunks * 64), c = (idx / 64) % chunks, v = idx % 64;
    out[idx] = *reinterpret_cast<const uint16_t*>(sm + c * kChunk + swizzle128(r, v / 8) + (v % 8) * 2);
  }
}

// cp.async of n 16-byte pieces, completion through mbar_arrive_on_cp_async (one arrival per thread).
__global__ void cp_async_kernel(const uint4* src, uint4* dst, int n) {
  __shared__ uint4 buf[256];
  __shared__ alignas(8) uint64_t bar;
  const uint32_t b = smem_addr(&bar);
  if (threadIdx.x == 0) mbar_init(b, blockDim.x);
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) cp_async_16(smem_addr(&buf[i]), src + i, 16);
  mbar_arrive_on_cp_async(b);
  mbar_wait(b, 0);
  for (int i = threadIdx.x; i < n; i += blockDim.x) dst[i] = buf[i];
}

// bulk_prefetch_l2 of n rows of `row_bytes` (656: fp8_ds_mla rows, 16-byte aligned but not 128), then a copy of
// the same rows: the prefetch has no result of its own; the test shows it is accepted at those addresses and
// sizes (no fault: a bad operand is an illegal-instruction or misaligned-address error) and leaves memory as it was.
__global__ void prefetch_kernel(const uint8_t* src, uint8_t* dst, int rows, int row_bytes) {
  for (int r = threadIdx.x; r < rows; r += blockDim.x) bulk_prefetch_l2(src + int64_t(r) * row_bytes, row_bytes);
  __syncthreads();
  for (int i = threadIdx.x; i < rows * row_bytes; i += blockDim.x) dst[i] = src[i];
}

// A cluster of two CTAs, the decode kernel's CTA pairs in miniature: for kRounds rounds through one buffer, each CTA
// fills its half (rank r: bytes [r * kHalf, r * kHalf + kHalf)), copies it into the peer's buffer (bulk_copy_to_peer,
// completing on the peer's full barrier, whose phase this CTA's own arrival expects the bytes of), waits for its
// full barrier, checks the whole buffer, and gives the buffer back to both producers (an empty barrier of 2 x 128
// arrivals: this CTA's threads and the peer's, mbar_arrive_cluster). Counts every wrong word in `errors`.
constexpr int kHalf = 4096, kPairRounds = 6;

__device__ uint32_t pair_word(uint32_t rank, int round, int i) { return (rank << 28) ^ (uint32_t(round) << 20) ^ uint32_t(i); }

__global__ void cluster_pair_kernel(int* errors, uint32_t* ranks) {
  __shared__ alignas(128) uint32_t buf[2 * kHalf / 4];
  __shared__ alignas(8) uint64_t full, empty;
  const uint32_t rank = cluster_ctarank(), peer = rank ^ 1u;
  const uint32_t f = smem_addr(&full), e = smem_addr(&empty);
  if (threadIdx.x == 0) {
    ranks[blockIdx.x] = rank | (cluster_nctarank() << 8);
    mbar_init(f, blockDim.x);
    mbar_init(e, 2 * blockDim.x);
    fence_barrier_init();
  }
  __syncthreads();
  cluster_sync();
  int bad = 0;
  for (int round = 0; round < kPairRounds; ++round) {
    mbar_wait(e, (uint32_t(round) & 1u) ^ 1u);  // both CTAs are done with the previous round's buffer
    for (int i = threadIdx.x; i < kHalf / 4; i += blockDim.x) buf[rank * (kHalf / 4) + i] = pair_word(rank, round, i);
    fence_proxy_async();
    named_barrier_sync(1, blockDim.x);
    if (threadIdx.x == 0) {
      mbar_arrive_expect_tx(f, kHalf);
      const uint32_t half = smem_addr(buf) + rank * kHalf;
      bulk_copy_to_peer(half, half, kHalf, f, peer);
    } else {
      mbar_arrive(f);
    }
    mbar_wait(f, uint32_t(round) & 1u);
    for (int i = threadIdx.x; i < 2 * kHalf / 4; i += blockDim.x) {
      const uint32_t from = uint32_t(i / (kHalf / 4));
      bad += buf[i] != pair_word(from, round, i % (kHalf / 4)) ? 1 : 0;
    }
    mbar_arrive(e);
    mbar_arrive_cluster(e, peer);
  }
  atomicAdd(errors, bad);
  cluster_sync();  // no CTA leaves while its peer may still arrive on its barrier
}

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = float_to_bf16(u(rng));
  return v;
}

template <typename T>
T* device_copy(const std::vector<T>& h) {
  T* d = nullptr;
  if (cudaMalloc(&d, h.size() * sizeof(T)) != cudaSuccess) return nullptr;
  cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

/// max |got - want| / max(1, |want|) over all elements (fp32 accumulation of bf16 products: exact to ~1e-6).
double worst_error(const std::vector<float>& got, const std::vector<double>& want) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - want[i]) / std::max(1.0, std::fabs(want[i]));
    worst = std::isnan(e) ? INFINITY : std::max(worst, e);
  }
  return worst;
}

/// D = A B^T through qk_kernel<kN> (A [64, 128], B [kN, 128], both K-major bf16 in global memory), on a NaN-poisoned
/// D, every element against a double-precision product.
template <int kN>
void check_qk(int smem_bytes, uint64_t seed_a, uint64_t seed_b) {
  const auto kernel = qk_kernel<kN>;
  const auto a = random_bf16(64 * 128, seed_a), b = random_bf16(kN * 128, seed_b);
  uint16_t *da = device_copy(a), *db = device_copy(b);
  float* dd = nullptr;
  CUDA_OK(cudaMalloc(&dd, 64 * kN * 4));
  CUDA_OK(cudaMemset(dd, 0xFF, 64 * kN * 4));
  CUDA_OK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes));
  kernel<<<1, 128, smem_bytes>>>(da, db, dd);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> got(64 * kN);
  CUDA_OK(cudaMemcpy(got.data(), dd, got.size() * 4, cudaMemcpyDeviceToHost));
  std::vector<double> want(64 * kN, 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < kN; ++n)
      for (int k = 0; k < 128; ++k)
        want[m * kN + n] += double(bf16_to_float(a[m * 128 + k])) * bf16_to_float(b[n * 128 + k]);
  EXPECT_LT(worst_error(got, want), 1e-5);
  cudaFree(da);
  cudaFree(db);
  cudaFree(dd);
}

TEST(PtxSm90, WgmmaKMajorBothOperands) {
  SKIP_UNLESS_HOPPER();
  check_qk<64>(5 * kChunk, 1, 2);
}

TEST(PtxSm90, WgmmaKMajorBothOperandsN128) {
  SKIP_UNLESS_HOPPER();
  check_qk<128>(7 * kChunk, 5, 6);
}

template <int kN, bool kPRegisters>
void check_pv() {
  const auto p = random_bf16(64 * 64, 3), v = random_bf16(64 * kN, 4);
  uint16_t *dp = device_copy(p), *dv = device_copy(v);
  float* dd = nullptr;
  ASSERT_EQ(cudaMalloc(&dd, 64 * kN * 4), cudaSuccess);
  ASSERT_EQ(cudaMemset(dd, 0xFF, 64 * kN * 4), cudaSuccess);
  ASSERT_EQ(cudaFuncSetAttribute(pv_kernel<kN, kPRegisters>, cudaFuncAttributeMaxDynamicSharedMemorySize, 6 * kChunk),
            cudaSuccess);
  pv_kernel<kN, kPRegisters><<<1, 128, 6 * kChunk>>>(dp, dv, dd);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << cudaGetErrorString(cudaGetLastError());
  std::vector<float> got(64 * kN);
  ASSERT_EQ(cudaMemcpy(got.data(), dd, got.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  std::vector<double> want(64 * kN, 0.0);
  for (int m = 0; m < 64; ++m)
    for (int n = 0; n < kN; ++n)
      for (int k = 0; k < 64; ++k) want[m * kN + n] += double(bf16_to_float(p[m * 64 + k])) * bf16_to_float(v[k * kN + n]);
  EXPECT_LT(worst_error(got, want), 1e-5);
  cudaFree(dp);
  cudaFree(dv);
  cudaFree(dd);
}

TEST(PtxSm90, WgmmaMnMajorBFromSharedA) {
  SKIP_UNLESS_HOPPER();
  check_pv<256, false>();
}

TEST(PtxSm90, WgmmaMnMajorBFromRegisterA) {
  SKIP_UNLESS_HOPPER();
  check_pv<256, true>();
}

TEST(PtxSm90, WgmmaN128MnMajorBFromRegisterA) {
  SKIP_UNLESS_HOPPER();
  check_pv<128, true>();
}

TEST(PtxSm90, WgmmaN128MnMajorBFromSharedA) {
  SKIP_UNLESS_HOPPER();
  check_pv<128, false>();
}

// TMA boxes of a paged bf16 cache with padded page strides, for a page larger than the box and one smaller.
TEST(PtxSm90, TmaBoxesOfAPagedCache) {
  SKIP_UNLESS_HOPPER();
  for (int page_size : {128, 16}) {
    SCOPED_TRACE("page_size=" + std::to_string(page_size));
    const int pages = 5, row_vals = 576, row_stride = row_vals * 2 + 64;      // padded rows
    const int64_t page_stride = int64_t(page_size) * row_stride + 256;       // padded pages
    std::vector<uint8_t> cache(size_t(pages * page_stride));
    std::mt19937 rng(5);
    for (auto& x : cache) x = uint8_t(rng());
    uint8_t* dc = device_copy(cache);
    KvCacheView kv;
    kv.format = KvFormat::kBF16;
    kv.pages = TensorView::strided(dc, DType::kUInt8, {pages, page_size, row_stride - 64}, {page_stride, row_stride, 1},
                                   Device::cuda(0));
    CUtensorMap map{};
    const Status st = decode::sm90::encode_kv_tensor_map(kv, &map);
    ASSERT_TRUE(st.ok()) << st.to_string();
    const int box_rows = std::min(page_size, 64), row = page_size > 64 ? 64 : 0, page = 3, chunks = 9;
    uint16_t* dout = nullptr;
    CUDA_OK(cudaMalloc(&dout, size_t(box_rows) * chunks * 64 * 2));
    CUDA_OK(cudaFuncSetAttribute(tma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 10 * kChunk));
    tma_kernel<<<1, 128, 10 * kChunk>>>(map, row, page, box_rows, chunks, dout);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> got(size_t(box_rows) * chunks * 64);
    CUDA_OK(cudaMemcpy(got.data(), dout, got.size() * 2, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int r = 0; r < box_rows; ++r)
      for (int v = 0; v < row_vals; ++v) {
        uint16_t want;
        std::memcpy(&want, cache.data() + page * page_stride + int64_t(row + r) * row_stride + v * 2, 2);
        bad += got[size_t(r) * row_vals + v] != want;
      }
    EXPECT_EQ(bad, 0);
    cudaFree(dc);
    cudaFree(dout);
  }
}

TEST(PtxSm90, CpAsyncCompletesOnMbarrier) {
  SKIP_UNLESS_HOPPER();
  std::vector<uint32_t> src(256 * 4);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint32_t(i * 2654435761u);
  uint32_t* ds = device_copy(src);
  uint32_t* dd = nullptr;
  CUDA_OK(cudaMalloc(&dd, src.size() * 4));
  cp_async_kernel<<<1, 96>>>(reinterpret_cast<const uint4*>(ds), reinterpret_cast<uint4*>(dd), 256);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint32_t> got(src.size());
  CUDA_OK(cudaMemcpy(got.data(), dd, got.size() * 4, cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, src);
  cudaFree(ds);
  cudaFree(dd);
}

TEST(PtxSm90, BulkPrefetchOfUnalignedRowsLeavesMemory) {
  SKIP_UNLESS_HOPPER();
  constexpr int kRows = 97, kRowBytes = 656;
  std::vector<uint8_t> src(size_t(kRows) * kRowBytes);
  for (size_t i = 0; i < src.size(); ++i) src[i] = uint8_t(i * 131u + 7u);
  uint8_t* ds = device_copy(src);
  uint8_t* dd = nullptr;
  CUDA_OK(cudaMalloc(&dd, src.size()));
  prefetch_kernel<<<1, 128>>>(ds, dd, kRows, kRowBytes);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint8_t> got(src.size());
  CUDA_OK(cudaMemcpy(got.data(), dd, got.size(), cudaMemcpyDeviceToHost));
  EXPECT_EQ(got, src);
  cudaFree(ds);
  cudaFree(dd);
}

TEST(PtxSm90, ClusterPairExchangesHalvesThroughPeerSharedMemory) {
  SKIP_UNLESS_HOPPER();
  int* errors = nullptr;
  uint32_t* ranks = nullptr;
  CUDA_OK(cudaMalloc(&errors, sizeof(int)));
  CUDA_OK(cudaMalloc(&ranks, 4 * sizeof(uint32_t)));
  CUDA_OK(cudaMemset(errors, 0, sizeof(int)));
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 2;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = 1;
  cfg.gridDim = dim3(4);  // two clusters
  cfg.blockDim = dim3(128);
  cfg.attrs = &attr;
  cfg.numAttrs = 1;
  CUDA_OK(cudaLaunchKernelEx(&cfg, cluster_pair_kernel, errors, ranks));
  CUDA_OK(cudaDeviceSynchronize());
  int bad = -1;
  uint32_t got[4] = {};
  CUDA_OK(cudaMemcpy(&bad, errors, sizeof(int), cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(got, ranks, sizeof(got), cudaMemcpyDeviceToHost));
  EXPECT_EQ(bad, 0) << "words of the buffer that were not what their writer stored, over " << kPairRounds << " rounds";
  for (uint32_t b = 0; b < 4; ++b) EXPECT_EQ(got[b], (b % 2) | (2u << 8)) << "rank | size << 8 of block " << b;
  cudaFree(errors);
  cudaFree(ranks);
}

}  // namespace
}  // namespace mlakit::cuda
