// The online-softmax pieces every attention kernel shares (src/cuda/common/online_softmax.cuh), on the GPU:
// - exp2_ftz against a double-precision 2^x over every float from -160 to 130 in steps of 1/64 plus the special
//   values: relative error within 2^-21 where 2^x is a normal float, exactly 0 where it would be subnormal (the
//   flush the kernels rely on: a weight below 2^-126 cannot move a row sum of at least 1), +inf above the range,
//   0 for -inf and NaN for NaN;
// - reduce_row_maxima, reduce_row_sums and advance_rows on a warp: each row's statistics over the four lanes of its
//   quad, alpha = 2^(m_old - m_new), m_use = 0 while a row has seen nothing (so that p = 0 and not NaN).

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/common/online_softmax.cuh"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

__global__ void exp2_kernel(const float* x, float* y, int n) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = cuda::exp2_ftz(x[i]);
}

TEST(OnlineSoftmax, Exp2FtzIsAccurateAndFlushesSubnormalResults) {
  std::vector<float> x;
  for (int k = -160 * 64; k <= 130 * 64; ++k) x.push_back(float(k) / 64.0f);
  x.push_back(-INFINITY);
  x.push_back(INFINITY);
  x.push_back(NAN);
  x.push_back(-126.0f);
  x.push_back(std::nextafter(-126.0f, -INFINITY));
  const int n = int(x.size());
  DeviceBuffer dx, dy;
  DeviceBuffer::upload(&dx, x);
  DeviceBuffer::upload(&dy, std::vector<float>(x.size(), 12345.0f));  // poisoned: every element must be written
  exp2_kernel<<<(n + 255) / 256, 256>>>(static_cast<const float*>(dx.get()), static_cast<float*>(dy.get()), n);
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<float> y = dy.download<float>(x.size());
  int bad = 0;
  for (int i = 0; i < n && bad < 8; ++i) {
    const double want = std::exp2(double(x[i]));
    bool ok;
    if (std::isnan(x[i])) {
      ok = std::isnan(y[i]);
    } else if (want > double(FLT_MAX)) {
      ok = std::isinf(y[i]) && y[i] > 0;
    } else if (want < 0x1p-126) {
      ok = y[i] == 0.0f;  // below the normal range: flushed (-inf gives 0 too)
    } else {
      ok = std::fabs(double(y[i]) - want) <= want * 0x1p-21;
    }
    if (!ok) {
      ++bad;
      ADD_FAILURE() << "exp2_ftz(" << x[i] << ") = " << y[i] << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0);
}

/// One warp: lane L holds rows (L / 4) and (L / 4 + 8) of a 16-row mma accumulator, as the kernels' threads do, and
/// runs one advance_rows step then reduce_row_sums, writing what every lane ends with.
__global__ void rows_kernel(const float* mx_in, const float* m_in, const float* l_in, float* out) {
  const int lane = int(threadIdx.x);
  float mx[2] = {mx_in[2 * lane], mx_in[2 * lane + 1]};
  float m[2] = {m_in[2 * lane], m_in[2 * lane + 1]};
  float l[2] = {l_in[2 * lane], l_in[2 * lane + 1]};
  float alpha[2], m_use[2];
  cuda::advance_rows(mx, m, l, alpha, m_use);
  cuda::reduce_row_sums(l);
  for (int e = 0; e < 2; ++e) {
    float* o = out + (2 * lane + e) * 5;
    o[0] = mx[e];
    o[1] = m[e];
    o[2] = l[e];
    o[3] = alpha[e];
    o[4] = m_use[e];
  }
}

TEST(OnlineSoftmax, RowStepsReduceOverTheQuad) {
  // Per lane and row: a partial tile maximum, the running maximum (the same on the four lanes of a quad, as in the
  // kernels) and a partial running sum. Quad 3 has seen nothing and sees nothing (all -inf); quad 5 sees its first
  // keys; the others move or keep their maxima.
  std::vector<float> mx(64), m(64), l(64);
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 2; ++e) {
      const int q = lane / 4, i = 2 * lane + e;
      mx[i] = float((lane * 7 + e * 3) % 11) - 5.0f;
      m[i] = float(q % 4) - 1.0f + float(e);
      l[i] = 0.25f * float(lane % 4 + 1);
      if (q == 3) mx[i] = -INFINITY;
      if (q == 3 || q == 5) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
      }
    }
  }
  DeviceBuffer dmx, dm, dl, dout;
  DeviceBuffer::upload(&dmx, mx);
  DeviceBuffer::upload(&dm, m);
  DeviceBuffer::upload(&dl, l);
  DeviceBuffer::upload(&dout, std::vector<float>(64 * 5, NAN));
  rows_kernel<<<1, 32>>>(static_cast<const float*>(dmx.get()), static_cast<const float*>(dm.get()),
                         static_cast<const float*>(dl.get()), static_cast<float*>(dout.get()));
  CACHE_TEST_CUDA(cudaDeviceSynchronize());
  const std::vector<float> out = dout.download<float>(64 * 5);
  for (int lane = 0; lane < 32; ++lane) {
    for (int e = 0; e < 2; ++e) {
      const int q0 = lane / 4 * 4;
      float tile_max = -INFINITY, sum = 0.0f;
      for (int k = 0; k < 4; ++k) tile_max = std::fmax(tile_max, mx[2 * (q0 + k) + e]);
      const float m_old = m[2 * lane + e];
      const float m_new = std::fmax(m_old, tile_max);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = std::exp2(m_old - m_use);
      for (int k = 0; k < 4; ++k) sum += l[2 * (q0 + k) + e] * alpha;
      const float* o = &out[(2 * lane + e) * 5];
      SCOPED_TRACE(testing::Message() << "lane " << lane << " row " << e);
      EXPECT_EQ(o[0], tile_max);
      EXPECT_EQ(o[1], m_new);
      EXPECT_NEAR(o[2], sum, 1e-6f * std::fmax(1.0f, sum));
      EXPECT_NEAR(o[3], alpha, 1e-6f);
      EXPECT_EQ(o[4], m_use);
    }
  }
}

}  // namespace
}  // namespace mlakit::test
