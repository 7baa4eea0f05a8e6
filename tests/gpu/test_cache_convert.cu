// The device conversions of the cache kernels (src/cuda/cache/common/convert.cuh) against numeric.h, the
// one definition the CPU reference uses, over every input: all 2^32 float bit patterns for the e4m3 and
// fp16 encoders, all 2^16 halves and all 256 e4m3 codes for the decoders. On sm_89+ these are hardware
// conversion instructions with NaN patches, so this is what makes "GPU cache bytes == CPU cache bytes"
// hold for every value, not only the ones the random tests happen to draw.

#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/cache/common/convert.cuh"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr int kThreads = 256;
constexpr int kBlocks = 4096;
constexpr int kMaxReported = 4;

struct Mismatches {
  unsigned long long count;
  uint32_t first[kMaxReported];
};

__device__ void report(Mismatches* m, uint32_t input) {
  const unsigned long long k = atomicAdd(&m->count, 1ull);
  if (k < kMaxReported) m->first[k] = input;
}

// Each thread walks a strided share of all 2^32 floats and compares both encoders with numeric.h.
__global__ void all_floats_kernel(Mismatches* e4m3, Mismatches* fp16, Mismatches* bf16) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (uint64_t u = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < (uint64_t(1) << 32); u += stride) {
    const float f = bits_float(uint32_t(u));
    if (cuda::cache::e4m3_from_float(f) != float_to_e4m3(f)) report(e4m3, uint32_t(u));
    // The pair form must put each value in its own byte.
    const uint16_t pair = cuda::cache::e4m3x2_from_float(f, -f);
    if (pair != uint16_t(float_to_e4m3(f) | (uint16_t(float_to_e4m3(-f)) << 8))) report(e4m3, uint32_t(u));
    if (cuda::cache::fp16_from_float(f) != float_to_fp16(f)) report(fp16, uint32_t(u));
    if (cuda::cache::bf16_from_float(f) != float_to_bf16(f)) report(bf16, uint32_t(u));
    const uint32_t b2 = cuda::cache::bf16x2_from_float2(f, -f);
    if (b2 != (uint32_t(float_to_bf16(f)) | (uint32_t(float_to_bf16(-f)) << 16))) report(bf16, uint32_t(u));
  }
}

// Divisors of the e4m3 writer sweep: typical per-tensor scales, awkward mantissas, both ends of the fast
// range (2^-60, 2^60) and a subnormal one (the IEEE-division fallback).
__constant__ float kDivisors[] = {1.0f / 64.0f, 0.0234f, 0.37f, 0.75f, 3.0f, 1.0f / 3.0f, 7.1e-5f, 448.0f,
                                  1.0f, 1e-3f, 123456.7f, 0.1f, 8.6736174e-19f, 1.1529215e18f, 1e-40f, 0.9999999f};
constexpr int kNumDivisors = 16;

// e4m3(x / d) through ExactDivider against numeric.h's e4m3 of the IEEE quotient, for every float x (the
// property the writer needs). The quotient bits must match too wherever they can decide an e4m3 byte:
// |x / d| >= 2^-10, half the smallest e4m3 step (below it every rounding gives +-0). For subnormal x the
// FMA residual is not exact and the last bit may differ (2026-11-22, H100: 78M such tiny quotients, all
// giving the right e4m3 byte), which is why smaller quotients are not compared bit for bit.
__global__ void divider_kernel(Mismatches* bytes, Mismatches* bits) {
  const uint64_t stride = uint64_t(gridDim.x) * blockDim.x;
  for (int k = 0; k < kNumDivisors; ++k) {
    const float d = kDivisors[k];
    const cuda::cache::ExactDivider div(d);
    for (uint64_t u = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; u < (uint64_t(1) << 32); u += stride) {
      const float x = bits_float(uint32_t(u));
      const float want = __fdiv_rn(x, d), got = div(x);
      if (float_to_e4m3(want) != cuda::cache::e4m3_from_float(got)) report(bytes, uint32_t(u));
      constexpr float kSmallestDecidingQuotient = 9.765625e-4f;  // 2^-10
      const bool comparable = fabsf(want) >= kSmallestDecidingQuotient;
      if (comparable && float_bits(want) != float_bits(got)) report(bits, uint32_t(u));
    }
  }
}

__global__ void all_codes_kernel(Mismatches* e4m3, Mismatches* fp16) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < 65536u) {
    if (float_bits(cuda::cache::float_from_fp16(uint16_t(i))) != float_bits(fp16_to_float(uint16_t(i)))) report(fp16, i);
    // e4m3 pairs: both bytes of every 16-bit pattern.
    const float2 f = cuda::cache::float2_from_e4m3x2(uint16_t(i));
    if (float_bits(f.x) != float_bits(e4m3_to_float(uint8_t(i & 0xffu))) ||
        float_bits(f.y) != float_bits(e4m3_to_float(uint8_t(i >> 8))))
      report(e4m3, i);
  }
}

void expect_none(const Mismatches& m, const char* what) {
  EXPECT_EQ(m.count, 0ull) << what << ": " << m.count << " inputs differ from numeric.h, e.g. 0x" << std::hex
                           << m.first[0] << " 0x" << m.first[1];
}

TEST(CacheConvert, EncodersMatchNumericForEveryFloat) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  (void)cuda;
  DeviceBuffer buf(3 * sizeof(Mismatches));
  CACHE_TEST_CUDA(cudaMemset(buf.get(), 0, 3 * sizeof(Mismatches)));
  Mismatches* m = buf.as<Mismatches>();
  all_floats_kernel<<<kBlocks, kThreads>>>(m, m + 1, m + 2);
  CACHE_TEST_CUDA(cudaGetLastError());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const auto host = buf.download<Mismatches>(3);
  expect_none(host[0], "e4m3 encoder");
  expect_none(host[1], "fp16 encoder");
  expect_none(host[2], "bf16 encoder");
}

TEST(CacheConvert, ExactDividerMatchesIeeeDivisionForEveryFloat) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  (void)cuda;
  DeviceBuffer buf(2 * sizeof(Mismatches));
  CACHE_TEST_CUDA(cudaMemset(buf.get(), 0, 2 * sizeof(Mismatches)));
  Mismatches* m = buf.as<Mismatches>();
  divider_kernel<<<kBlocks, kThreads>>>(m, m + 1);
  CACHE_TEST_CUDA(cudaGetLastError());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const auto host = buf.download<Mismatches>(2);
  expect_none(host[0], "e4m3 of x / d");
  expect_none(host[1], "x / d bits");
}

TEST(CacheConvert, DecodersMatchNumericForEveryCode) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  (void)cuda;
  DeviceBuffer buf(2 * sizeof(Mismatches));
  CACHE_TEST_CUDA(cudaMemset(buf.get(), 0, 2 * sizeof(Mismatches)));
  Mismatches* m = buf.as<Mismatches>();
  all_codes_kernel<<<65536 / kThreads, kThreads>>>(m, m + 1);
  CACHE_TEST_CUDA(cudaGetLastError());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const auto host = buf.download<Mismatches>(2);
  expect_none(host[0], "e4m3 decoder");
  expect_none(host[1], "fp16 decoder");
}

}  // namespace
}  // namespace mlakit::test
