// How many bits the fp8 (e4m3) warpgroup MMA keeps when it adds its products to the accumulator: step 1 of
// docs/experiments/sm90-fp8-mma-study.md, whose error emulation assumes one of two models (its k32_step: "sum14", the
// step's exact sum added and the result cut to 14 significant bits, after DeepSeek-V3's report on H800; "aligned",
// products and accumulator aligned to the largest exponent, each cut to 13 fraction bits below it, the result to 14).
// One warpgroup issues wgmma.mma_async m64n8k32 e4m3 (A and B from shared memory, 128-byte swizzle, as the decode
// kernels' operands) `chain` times in one commit group, with A all 1.0, so every one of the 64 x 8 outputs is
// C + chain x (the sum of B's 32 values in its column); printed per probe: the smallest and largest D - C over the 512
// outputs against the exact value.
//   (a) C = 2^e, e = 0..24, one product of 1: where the 1 shrinks or vanishes (fp32 keeps it to e = 23);
//   (b) C = 2^e, products 256 and 31 x 2^-6 (exact 256.484375): "sum14" gives 256.46875 for small e, "aligned" 256;
//   (c) C = 2^14, one product of 1.875: 0 under truncation, 2 under round-to-nearest (ulp 2 at 14 bits);
//   (d) C = -2^e, one product of 1: truncation toward zero or toward minus infinity;
//   (e) C = 2^14, eight chained steps of +1 (exact 8): whether each step cuts, as chained tiles of one P V would.
// Build and run on the GPU machine (sm_90a):
//   nvcc -std=c++17 -O2 -gencode arch=compute_90a,code=sm_90a scripts/fp8_wgmma_accumulator.cu -o /tmp/fp8_acc
//   /tmp/fp8_acc
// Nothing here is part of the library or its tests.

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kM = 64, kN = 8, kK = 32;  // one m64n8k32 step
constexpr int kRow = 128;                // bytes per swizzled row (the 128-byte swizzle's atom width)

/// Byte of logical (row, k) in a tile of 128-byte rows with the 128-byte swizzle (piece j of row r at j ^ r % 8).
__host__ __device__ int swizzled(int row, int k) { return row * kRow + (((k / 16) ^ (row % 8)) * 16) + k % 16; }

__device__ uint64_t desc_128b(uint32_t addr) {  // K-major, 128-byte swizzle: sbo = 1024 (8 rows), lbo unused
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

/// One warpgroup: D = C + chain x (A B) for C given per probe (the same in every output), A and B as e4m3 bytes.
__global__ void __launch_bounds__(128) probe(const uint8_t* a, const uint8_t* b, const float* c, const int* chain,
                                             float* d, int probes) {
  __shared__ __align__(1024) uint8_t sa[kM * kRow];
  __shared__ __align__(1024) uint8_t sb[kN * kRow];
  for (int p = 0; p < probes; ++p) {
    for (int i = threadIdx.x; i < kM * kRow; i += 128) sa[i] = 0;
    for (int i = threadIdx.x; i < kN * kRow; i += 128) sb[i] = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < kM * kK; i += 128) sa[swizzled(i / kK, i % kK)] = a[p * kM * kK + i];
    for (int i = threadIdx.x; i < kN * kK; i += 128) sb[swizzled(i / kK, i % kK)] = b[p * kN * kK + i];
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");  // generic-proxy stores, then async-proxy reads
    __syncthreads();
    float acc[4];
    for (float& x : acc) x = c[p];
    const uint64_t da = desc_128b(uint32_t(__cvta_generic_to_shared(sa)));
    const uint64_t db = desc_128b(uint32_t(__cvta_generic_to_shared(sb)));
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
    for (int s = 0; s < chain[p]; ++s) {
      asm volatile(
          "{\n .reg .pred q;\n setp.ne.b32 q, 1, 0;\n"
          "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, %4, %5, q, 1, 1;\n}\n"
          : "+f"(acc[0]), "+f"(acc[1]), "+f"(acc[2]), "+f"(acc[3])
          : "l"(da), "l"(db));
    }
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
    for (float& x : acc) asm volatile("" : "+f"(x)::"memory");  // no read of acc moves above the wait
    for (int i = 0; i < 4; ++i) d[(p * 128 + threadIdx.x) * 4 + i] = acc[i];
    __syncthreads();
  }
}

float e4m3_value(uint8_t code) {  // OCP e4m3 ("fn"): bias 7, subnormals 2^-9 steps, no infinities
  const int e = (code >> 3) & 0xF, m = code & 7;
  const float v = e == 0 ? std::ldexp(float(m), -9) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return (code & 0x80) ? -v : v;
}

uint8_t e4m3_code(float v) {  // the code of an exactly representable value
  for (int c = 0; c < 256; ++c) {
    if (c != 0x7F && c != 0xFF && e4m3_value(uint8_t(c)) == v) return uint8_t(c);
  }
  std::printf("%g is not an e4m3 value\n", double(v));
  return 0;
}

struct Probe {
  const char* what;
  float c;
  std::vector<float> b_values;  // B's nonzero values in every column (the rest 0)
  int chain;                    // wgmma steps in one commit group
  double exact;                 // the exact D - C
};

}  // namespace

int main() {
  std::vector<Probe> probes;
  for (int e = 0; e <= 24; ++e) probes.push_back({"(a) C = 2^e, one product 1", std::ldexp(1.0f, e), {1.0f}, 1, 1.0});
  for (int e = 0; e <= 16; e += 2) {
    std::vector<float> v(1, 256.0f);
    v.insert(v.end(), 31, 1.0f / 64);
    probes.push_back({"(b) C = 2^e, 256 + 31 x 2^-6", std::ldexp(1.0f, e), v, 1, 256.0 + 31.0 / 64.0});
  }
  probes.push_back({"(c) C = 2^14, one product 1.875", std::ldexp(1.0f, 14), {1.875f}, 1, 1.875});
  for (int e = 12; e <= 16; ++e) {
    probes.push_back({"(d) C = -2^e, one product 1", -std::ldexp(1.0f, e), {1.0f}, 1, 1.0});
  }
  probes.push_back({"(e) C = 2^14, 8 chained steps of 1", std::ldexp(1.0f, 14), {1.0f}, 8, 8.0});
  probes.push_back({"(e) C = 2^10, 8 chained steps of 1", std::ldexp(1.0f, 10), {1.0f}, 8, 8.0});
  const int n = int(probes.size());
  std::vector<uint8_t> a(size_t(n) * kM * kK, e4m3_code(1.0f)), b(size_t(n) * kN * kK, 0);
  std::vector<float> c(static_cast<size_t>(n));
  std::vector<int> chain(static_cast<size_t>(n));
  for (int p = 0; p < n; ++p) {
    c[size_t(p)] = probes[size_t(p)].c;
    chain[size_t(p)] = probes[size_t(p)].chain;
    for (int col = 0; col < kN; ++col) {
      for (size_t k = 0; k < probes[size_t(p)].b_values.size(); ++k) {
        b[(size_t(p) * kN + size_t(col)) * kK + k] = e4m3_code(probes[size_t(p)].b_values[k]);
      }
    }
  }
  uint8_t *da = nullptr, *db = nullptr;
  float *dc = nullptr, *dd = nullptr;
  int* dchain = nullptr;
  cudaMalloc(&da, a.size());
  cudaMalloc(&db, b.size());
  cudaMalloc(&dc, c.size() * sizeof(float));
  cudaMalloc(&dchain, chain.size() * sizeof(int));
  cudaMalloc(&dd, size_t(n) * 512 * sizeof(float));
  cudaMemcpy(da, a.data(), a.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(db, b.data(), b.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(dc, c.data(), c.size() * sizeof(float), cudaMemcpyHostToDevice);
  cudaMemcpy(dchain, chain.data(), chain.size() * sizeof(int), cudaMemcpyHostToDevice);
  probe<<<1, 128>>>(da, db, dc, dchain, dd, n);
  std::vector<float> d(size_t(n) * 512);
  const cudaError_t err = cudaMemcpy(d.data(), dd, d.size() * sizeof(float), cudaMemcpyDeviceToHost);
  if (err != cudaSuccess) {
    std::printf("CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
  }
  std::printf("%-36s %14s %16s %16s %16s\n", "probe", "C", "exact D - C", "min D - C", "max D - C");
  for (int p = 0; p < n; ++p) {
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < 512; ++i) {
      const double diff = double(d[size_t(p) * 512 + size_t(i)]) - double(c[size_t(p)]);
      lo = std::fmin(lo, diff);
      hi = std::fmax(hi, diff);
    }
    std::printf("%-36s %14.9g %16.9g %16.9g %16.9g\n", probes[size_t(p)].what, double(c[size_t(p)]),
                probes[size_t(p)].exact, lo, hi);
  }
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
  cudaFree(dchain);
  cudaFree(dd);
  return 0;
}
