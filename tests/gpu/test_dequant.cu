// The fp8 dequantisation of the decode kernels (src/cuda/decode/smxx/dequant.cuh, used by the portable and the
// Hopper kernels) against numeric.h, the definition the CPU reference uses, over every e4m3 code: e4m3 -> bf16 and
// fp16 exactly, and e4m3 x group scale (the fp32 product) rounded to bf16 and fp16 for 196,608 scales (every bf16
// pattern, every fp16 pattern, 65,536 hashed fp32 patterns: zeros, subnormals, infinities and NaN included), bit for
// bit (NaN: any NaN). Any faster route the kernels take later must keep these results.

#include <gtest/gtest.h>

#include <cstdint>

#include "cuda/common/ue8m0.cuh"
#include "cuda/decode/smxx/dequant.cuh"
#include "mlakit/numeric.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr int kScalesPerFamily = 65536;
constexpr int kFamilies = 3;  // bf16 patterns, fp16 patterns, hashed fp32 patterns
constexpr int kMaxReported = 4;

struct Mismatches {
  unsigned long long count;
  uint32_t scale_bits[kMaxReported];
  uint32_t code[kMaxReported];
};

__device__ void report(Mismatches* m, float scale, uint32_t code) {
  const unsigned long long k = atomicAdd(&m->count, 1ull);
  if (k < kMaxReported) {
    m->scale_bits[k] = float_bits(scale);
    m->code[k] = code;
  }
}

__device__ float scale_of(uint32_t i) {
  const uint32_t family = i / kScalesPerFamily, k = i % kScalesPerFamily;
  if (family == 0) return bf16_to_float(uint16_t(k));
  if (family == 1) return fp16_to_float(uint16_t(k));
  uint32_t h = k * 2654435761u;  // a spread of fp32 patterns: every exponent, full mantissas
  h ^= h >> 15;
  h *= 2246822519u;
  h ^= h >> 13;
  return bits_float(h);
}

__device__ bool same16(uint16_t got, uint16_t want, bool bf16) {
  const float w = bf16 ? bf16_to_float(want) : fp16_to_float(want);
  if (isnan(w)) return isnan(bf16 ? bf16_to_float(got) : fp16_to_float(got));
  return got == want;
}

/// The 8 codes 8 v .. 8 v + 7, byte k = element k.
__device__ uint2 codes(uint32_t v) {
  const uint32_t c0 = 8 * v;
  return make_uint2(c0 | (c0 + 1) << 8 | (c0 + 2) << 16 | (c0 + 3) << 24,
                    (c0 + 4) | (c0 + 5) << 8 | (c0 + 6) << 16 | (c0 + 7) << 24);
}

/// Compares the 8 results of codes(v) (as bf16 and fp16) with numeric.h's rounding of e4m3 x scale in fp32.
__device__ void check8(uint32_t v, float s, uint4 ob, uint4 oh, Mismatches* bf16_bad, Mismatches* fp16_bad) {
  const uint32_t wb[4] = {ob.x, ob.y, ob.z, ob.w}, wh[4] = {oh.x, oh.y, oh.z, oh.w};
  for (uint32_t k = 0; k < 8; ++k) {
    const uint32_t code = 8 * v + k;
    const float exact = e4m3_to_float(uint8_t(code)) * s;
    if (!same16(uint16_t(wb[k / 2] >> (16 * (k % 2))), float_to_bf16(exact), true)) report(bf16_bad, s, code);
    if (!same16(uint16_t(wh[k / 2] >> (16 * (k % 2))), float_to_fp16(exact), false)) report(fp16_bad, s, code);
  }
}

/// Thread = one scale; it converts all 256 codes, 8 at a time, into both output types.
__global__ void scaled_kernel(Mismatches* bf16_bad, Mismatches* fp16_bad) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= uint32_t(kFamilies * kScalesPerFamily)) return;
  const float s = scale_of(i);
  for (uint32_t v = 0; v < 32; ++v) {
    const uint2 in = codes(v);
    check8(v, s, cuda::decode::e4m3x8_scaled_to<true>(in, s), cuda::decode::e4m3x8_scaled_to<false>(in, s), bf16_bad,
           fp16_bad);
  }
}

/// e4m3 -> q's type without a scale (fp8_e4m3 caches), all 256 codes: thread v converts codes 8 v .. 8 v + 7.
__global__ void unscaled_kernel(Mismatches* bf16_bad, Mismatches* fp16_bad) {
  const uint32_t v = threadIdx.x;
  const uint2 in = codes(v);
  check8(v, 1.0f, cuda::decode::e4m3x8_to<true>(in), cuda::decode::e4m3x8_to<false>(in), bf16_bad, fp16_bad);
}

/// fp8_ds_v4's bf16 route (e4m3x8_pow2_scaled_to_bf16) against the fp32 route, bit for bit: thread = one UE8M0 exponent
/// (all 256, as the kernels decode them), all 256 codes.
__global__ void pow2_kernel(Mismatches* bad) {
  const uint32_t e = threadIdx.x;
  const float s = cuda::ue8m0_to_float(e);
  const __nv_bfloat162 s2 = __float2bfloat162_rn(s);
  for (uint32_t v = 0; v < 32; ++v) {
    const uint2 in = codes(v);
    const uint4 got = cuda::decode::e4m3x8_pow2_scaled_to_bf16(in, s2);
    const uint4 want = cuda::decode::e4m3x8_scaled_to<true>(in, s);
    const uint32_t g[4] = {got.x, got.y, got.z, got.w}, w[4] = {want.x, want.y, want.z, want.w};
    for (uint32_t k = 0; k < 8; ++k) {
      const uint16_t gk = uint16_t(g[k / 2] >> (16 * (k % 2))), wk = uint16_t(w[k / 2] >> (16 * (k % 2)));
      if (!same16(gk, wk, true)) report(bad, s, 8 * v + k);
    }
  }
}

/// The arithmetic e4m3 pair decoder (what devices below sm_89 run) over all 65,536 byte pairs, against numeric.h.
__global__ void arith_pairs_kernel(Mismatches* bad) {
  const uint32_t v = blockIdx.x * blockDim.x + threadIdx.x;
  if (v >= 65536u) return;
  const uint32_t h = cuda::e4m3x2_to_half2_arith(uint16_t(v));
  for (uint32_t k = 0; k < 2; ++k) {
    const uint8_t code = uint8_t(v >> (8 * k));
    if (!same16(uint16_t(h >> (16 * k)), float_to_fp16(e4m3_to_float(code)), false)) report(bad, 1.0f, v);
  }
}

void expect_none(const Mismatches& m, const char* what) {
  EXPECT_EQ(m.count, 0ull) << what << ": " << m.count << " results differ from numeric.h, e.g. scale bits 0x"
                           << std::hex << m.scale_bits[0] << " code 0x" << m.code[0] << ", scale bits 0x"
                           << m.scale_bits[1] << " code 0x" << m.code[1];
}

TEST(Dequant, E4m3ToBf16AndFp16ExactForEveryCode) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  (void)cuda;
  DeviceBuffer buf(2 * sizeof(Mismatches));
  CACHE_TEST_CUDA(cudaMemset(buf.get(), 0, 2 * sizeof(Mismatches)));
  Mismatches* m = buf.as<Mismatches>();
  unscaled_kernel<<<1, 32>>>(m, m + 1);
  CACHE_TEST_CUDA(cudaGetLastError());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const auto host = buf.download<Mismatches>(2);
  expect_none(host[0], "e4m3 -> bf16");
  expect_none(host[1], "e4m3 -> fp16");
}

TEST(Dequant, GroupScaledMatchesFp32ProductForEveryCodeAndScale) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  (void)cuda;
  DeviceBuffer buf(2 * sizeof(Mismatches));
  CACHE_TEST_CUDA(cudaMemset(buf.get(), 0, 2 * sizeof(Mismatches)));
  Mismatches* m = buf.as<Mismatches>();
  constexpr int kThreads = 256;
  scaled_kernel<<<kFamilies * kScalesPerFamily / kThreads, kThreads>>>(m, m + 1);
  CACHE_TEST_CUDA(cudaGetLastError());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const auto host = buf.download<Mismatches>(2);
  expect_none(host[0], "e4m3 x scale -> bf16");
  expect_none(host[1], "e4m3 x scale -> fp16");
}

/// Runs a checking kernel that counts into one zeroed Mismatches (launch(m) starts it) and expects none, naming `what`.
template <typename Launch>
void expect_kernel_finds_none(Launch launch, const char* what) {
  DeviceBuffer buf(sizeof(Mismatches));
  CACHE_TEST_CUDA(cudaMemset(buf.get(), 0, sizeof(Mismatches)));
  launch(buf.as<Mismatches>());
  CACHE_TEST_CUDA(cudaGetLastError());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  expect_none(buf.download<Mismatches>(1)[0], what);
}

TEST(Dequant, PowerOfTwoScaleInBf16MatchesTheFp32RouteForEveryCodeAndExponent) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  (void)cuda;
  expect_kernel_finds_none([](Mismatches* m) { pow2_kernel<<<1, 256>>>(m); }, "e4m3 x 2^(e - 127) in bf16");
}

TEST(Dequant, ArithmeticPairDecoderOfPreAdaDevicesMatchesForEveryPair) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  (void)cuda;
  expect_kernel_finds_none([](Mismatches* m) { arith_pairs_kernel<<<256, 256>>>(m); }, "arithmetic e4m3x2 -> half2");
}

}  // namespace
}  // namespace mlakit::test
