// cuda standalone RoPE (docs/spec.md section 7) against the CPU reference, bit for bit: dtypes, both pairings,
// token and head counts, strided x. Tokens whose device-side position lies outside the table are left as
// they are.

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "mlakit/backend.h"
#include "mlakit/problems.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr uint64_t kSeed = 0x20be;
constexpr int64_t kMaxPos = 4096;


using RopeParam = std::tuple<DType, RopeStyle, std::pair<int64_t, int64_t>, int64_t>;  // dtype, style, (T, H), d_r
class RopeGrid : public ::testing::TestWithParam<RopeParam> {};

TEST_P(RopeGrid, BitsEqualReference) {
  CACHE_TEST_REQUIRE_CUDA(cuda);
  const auto [dtype, style, th, d_r] = GetParam();
  const auto [T, H] = th;
  SCOPED_TRACE(std::string("x=") + dtype_name(dtype) + " style=" + rope_style_name(style) + " T=" +
               std::to_string(T) + " H=" + std::to_string(H) + " d_r=" + std::to_string(d_r));
  std::mt19937_64 rng(kSeed + uint64_t(T * 131 + H * 7 + d_r));
  // x is the rope part of a q-like tensor: row stride d_r + 5 (no alignment rule), token stride with a gap.
  const int64_t stride_h = d_r + 5, stride_t = H * stride_h + 3;
  const auto x = encode_values(random_floats(rng, size_t(T * stride_t), 4.0f), dtype);
  std::vector<int64_t> pos(static_cast<size_t>(T));
  std::uniform_int_distribution<int64_t> pd(0, kMaxPos - 1);
  for (auto& p : pos) p = pd(rng);
  const auto table = rope_table(kMaxPos, d_r);

  std::vector<uint8_t> ref = x;
  RopeProblem hp;
  hp.x = TensorView::strided(ref.data(), dtype, {T, H, d_r}, {stride_t, stride_h, 1}, Device::cpu());
  hp.positions = TensorView::strided(pos.data(), DType::kInt64, {T}, {1}, Device::cpu());
  hp.cos_sin = TensorView::strided(table.data(), DType::kFP32, {kMaxPos, d_r}, {d_r, 1}, Device::cpu());
  hp.style = style;
  ASSERT_TRUE(reference_backend()->run(hp, nullptr).ok());

  DeviceBuffer xd, pd_, td;
  DeviceBuffer::upload(&xd, x);
  DeviceBuffer::upload(&pd_, pos);
  DeviceBuffer::upload(&td, table);
  RopeProblem dp = hp;
  dp.x = TensorView::strided(xd.get(), dtype, {T, H, d_r}, {stride_t, stride_h, 1}, Device::cuda());
  dp.positions = TensorView::strided(pd_.get(), DType::kInt64, {T}, {1}, Device::cuda());
  dp.cos_sin = TensorView::strided(td.get(), DType::kFP32, {kMaxPos, d_r}, {d_r, 1}, Device::cuda());
  ASSERT_TRUE(cuda->supports(dp).ok());
  ASSERT_TRUE(cuda->run(dp, nullptr).ok());
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  EXPECT_TRUE(same_bytes(xd.download<uint8_t>(x.size()), ref, "x"));

  // Out-of-range device positions: those tokens keep their values.
  if (T > 2) {
    std::vector<int64_t> bad = pos;
    bad[0] = -1;
    bad[size_t(T - 1)] = kMaxPos;
    pd_.copy_from(bad);
    xd.copy_from(x);
    ASSERT_TRUE(cuda->run(dp, nullptr).ok());
    CACHE_TEST_CUDA(cudaDeviceSynchronize());
    const auto got = xd.download<uint8_t>(x.size());
    const size_t es = dtype_size(dtype);
    for (const int64_t t : {int64_t(0), T - 1})
      for (size_t i = size_t(t * stride_t) * es; i < size_t((t + 1) * stride_t) * es && i < x.size(); ++i)
        ASSERT_EQ(got[i], x[i]) << "token " << t << " with an out-of-range position changed at byte " << i;
    for (size_t i = size_t(stride_t) * es; i < size_t((T - 1) * stride_t) * es; ++i)
      ASSERT_EQ(got[i], ref[i]) << "byte " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Grid, RopeGrid,
    ::testing::Combine(::testing::Values(DType::kBF16, DType::kFP16, DType::kFP32),
                       ::testing::Values(RopeStyle::kInterleaved, RopeStyle::kNeox),
                       ::testing::Values(std::pair<int64_t, int64_t>{1, 1}, std::pair<int64_t, int64_t>{37, 16},
                                         std::pair<int64_t, int64_t>{300, 3}),
                       ::testing::Values(int64_t{64}, int64_t{2}, int64_t{130})));

}  // namespace
}  // namespace mlakit::test
