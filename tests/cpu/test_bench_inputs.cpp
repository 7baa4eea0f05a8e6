// The bench's input generators (tools/mlakit/random_fill.h): uniform values in [-1, 1) and, for
// `mlakit bench --mode prefill --inputs normal`, standard normal ones, both a pure function of (seed, index).

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "random_fill.h"

namespace mlakit::cli {
namespace {

constexpr uint64_t kSeed = 20261128;
constexpr int kSamples = 1 << 20;

TEST(BenchInputs, UniformValuesLieInMinusOneToOne) {
  double sum = 0;
  for (int i = 0; i < kSamples; ++i) {
    const float x = random_input(Inputs::kUniform, kSeed, uint64_t(i));
    ASSERT_GE(x, -1.0f) << i;
    ASSERT_LT(x, 1.0f) << i;
    sum += x;
  }
  EXPECT_NEAR(sum / kSamples, 0.0, 0.005);  // the mean of 2^20 draws of U(-1, 1): standard error 0.0006
}

// Mean 0, variance 1, the share beyond 2 and 3 standard deviations of N(0, 1) (4.55% and 0.27%), every value finite,
// and the same value for the same (seed, index): the draws are what torch.randn would give in distribution.
TEST(BenchInputs, NormalValuesAreStandardNormal) {
  double sum = 0, sum_sq = 0;
  int beyond2 = 0, beyond3 = 0;
  for (int i = 0; i < kSamples; ++i) {
    const float x = random_input(Inputs::kNormal, kSeed, uint64_t(i));
    ASSERT_TRUE(std::isfinite(x)) << i;
    sum += x;
    sum_sq += double(x) * x;
    beyond2 += std::fabs(x) > 2.0f;
    beyond3 += std::fabs(x) > 3.0f;
  }
  const double mean = sum / kSamples, var = sum_sq / kSamples - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.005);  // standard error 0.001
  EXPECT_NEAR(var, 1.0, 0.01);    // standard error about 0.0014
  EXPECT_NEAR(double(beyond2) / kSamples, 0.0455, 0.002);
  EXPECT_NEAR(double(beyond3) / kSamples, 0.0027, 0.0005);
  EXPECT_EQ(random_input(Inputs::kNormal, kSeed, 12345), random_input(Inputs::kNormal, kSeed, 12345));
  EXPECT_NE(random_input(Inputs::kNormal, kSeed, 12345), random_input(Inputs::kNormal, kSeed + 1, 12345));
}

}  // namespace
}  // namespace mlakit::cli
