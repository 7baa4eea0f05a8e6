// The CUDA sparse kernels' division of row ids by the page size (src/cuda/decode/smxx/fast_div.h) against the `/` it
// replaces: every divisor up to 4096, powers of two and their neighbours up to 2^31 - 1, the page sizes engines use,
// each with dividends at the edges of every quotient (k d - 1, k d, k d + 1), the largest ids and random ones.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "cuda/decode/smxx/fast_div.h"

namespace mlakit::cuda::decode {
namespace {

constexpr int32_t kMaxId = INT32_MAX;

void check_divisor(int32_t d, std::mt19937_64& rng) {
  const FastDiv f = make_fast_div(d);
  std::vector<int32_t> ns = {0, 1, 2, kMaxId, kMaxId - 1, kMaxId - d + 1};
  // The edges of the first quotients and of the last ones below 2^31.
  for (int64_t k = 1; k <= 64; ++k) {
    for (const int64_t base : {k * int64_t(d), (int64_t(kMaxId) / d - k + 1) * int64_t(d)}) {
      for (const int64_t n : {base - 1, base, base + 1}) {
        if (n >= 0 && n <= kMaxId) ns.push_back(int32_t(n));
      }
    }
  }
  std::uniform_int_distribution<int32_t> any(0, kMaxId);
  for (int i = 0; i < 256; ++i) ns.push_back(any(rng));
  for (const int32_t n : ns) {
    ASSERT_EQ(fast_div(n, f), n / d) << "n=" << n << " d=" << d << " mul=" << f.mul << " shift=" << f.shift;
  }
}

TEST(FastDiv, MatchesIntegerDivision) {
  std::mt19937_64 rng(20261125);
  for (int32_t d = 1; d <= 4096; ++d) check_divisor(d, rng);
  for (int l = 12; l <= 31; ++l) {
    for (const int64_t d : {(int64_t(1) << l) - 1, int64_t(1) << l, (int64_t(1) << l) + 1}) {
      if (d <= kMaxId) check_divisor(int32_t(d), rng);
    }
  }
  for (const int32_t d : {576, 656, 1000003, 123456789}) check_divisor(d, rng);
  std::uniform_int_distribution<int32_t> any(1, kMaxId);
  for (int i = 0; i < 2000; ++i) check_divisor(any(rng), rng);
}

TEST(FastDiv, DivisorOneIsTheIdentity) {
  const FastDiv f = make_fast_div(1);
  EXPECT_EQ(f.mul, 0u);
  for (const int32_t n : {0, 1, 61, kMaxId}) EXPECT_EQ(fast_div(n, f), n);
}

}  // namespace
}  // namespace mlakit::cuda::decode
