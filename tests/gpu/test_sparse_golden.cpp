// FlashMLA's sparse golden vectors for DeepSeek V4 and V3.2 (MLAKIT_TESTDATA_DIR "/flashmla_sparse") through every
// CUDA sparse decode path on device memory, and FlashMLA's V4 cache bytes written by the cuda append_kv: the checks
// of tests/cpu/test_flashmla_sparse_golden.cpp (common/sparse_golden.cpp), on the GPU.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "common/sparse_golden.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

class DeviceMemory final : public OperandMemory {
 public:
  void* copy_in(const void* host, size_t bytes) override {
    blocks_.push_back(std::make_unique<DeviceBuffer>(bytes));
    void* d = blocks_.back()->get();
    EXPECT_NE(d, nullptr) << "cudaMalloc of " << bytes << " bytes";
    if (bytes > 0) {
      EXPECT_EQ(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
    return d;
  }
  void copy_out(void* host, const void* mem, size_t bytes) override {
    if (bytes > 0) {
      EXPECT_EQ(cudaMemcpy(host, mem, bytes, cudaMemcpyDeviceToHost), cudaSuccess);
    }
  }
  void sync() override { EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess); }
  Device device() const override { return Device::cuda(0); }

 private:
  std::vector<std::unique_ptr<DeviceBuffer>> blocks_;
};

using GoldenParam = std::tuple<std::string, SparseGoldenCase>;
class CudaSparseGolden : public ::testing::TestWithParam<GoldenParam> {};

TEST_P(CudaSparseGolden, ReproducesFlashMla) {
  const auto& [backend, gc] = GetParam();
  std::string why;
  const Backend* be = cuda_backend(&why, backend);
  if (be == nullptr) GTEST_SKIP() << why;
  DeviceMemory mem;
  // Both paths must serve every case (V3.2 and V4; the cases have 64 or 128 heads, past the Hopper fp8 row rule).
  check_sparse_golden_decode(gc, *be, mem, /*skip_refusal=*/false);
}

INSTANTIATE_TEST_SUITE_P(Manifest, CudaSparseGolden,
                         ::testing::Combine(::testing::Values(std::string("cuda"), std::string("cuda_sm90")),
                                            ::testing::ValuesIn(sparse_golden_cases())),
                         [](const ::testing::TestParamInfo<GoldenParam>& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param).name;
                         });

class CudaSparseGoldenBytes : public ::testing::TestWithParam<SparseGoldenCase> {};

TEST_P(CudaSparseGoldenBytes, AppendKvWritesFlashMlasV4Bytes) {
  std::string why;
  const Backend* be = cuda_backend(&why, "cuda");
  if (be == nullptr) GTEST_SKIP() << why;
  DeviceMemory mem;
  check_sparse_golden_append(GetParam(), *be, mem);
}

INSTANTIATE_TEST_SUITE_P(Manifest, CudaSparseGoldenBytes, ::testing::ValuesIn(sparse_golden_cases_with_kv_bf16()),
                         [](const ::testing::TestParamInfo<SparseGoldenCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mlakit::test
