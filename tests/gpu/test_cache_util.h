#pragma once
// Helpers of the cuda cache-operation tests (tests/gpu/test_cache_*.cu): device buffers, the cuda backend,
// seeded random data and byte patterns. Header-only so each test executable stays self-contained.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mlakit/numeric.h"
#include "mlakit/registry.h"

namespace mlakit::test {

/// Asserts a CUDA runtime call succeeded (test code: failing loudly is right here).
#define CACHE_TEST_CUDA(call)                                                           \
  do {                                                                                  \
    const cudaError_t cache_test_err_ = (call);                                         \
    ASSERT_EQ(cache_test_err_, cudaSuccess) << #call << ": " << cudaGetErrorString(cache_test_err_); \
  } while (0)

/// Owning device allocation, filled from and read back into host vectors.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes) { allocate(bytes); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  /// A new allocation of `bytes` (the previous one, if any, freed); null, and a test failure, when cudaMalloc fails.
  void allocate(size_t bytes) {
    if (ptr_ != nullptr) cudaFree(ptr_);
    bytes_ = bytes;
    // One extra 256-byte granule so zero-sized buffers still get a distinct, aligned pointer.
    const cudaError_t err = cudaMalloc(&ptr_, bytes + kSlack);
    if (err != cudaSuccess) {
      ptr_ = nullptr;
      bytes_ = 0;
      ADD_FAILURE() << "cudaMalloc of " << bytes + kSlack << " bytes: " << cudaGetErrorString(err);
    }
  }
  /// `host` in a new allocation of at least `min_bytes` (room for later, larger contents).
  template <class T>
  static void upload(DeviceBuffer* b, const std::vector<T>& host, size_t min_bytes = 0) {
    b->allocate(std::max(host.size() * sizeof(T), min_bytes));
    b->copy_from(host);
  }
  /// The first `count` elements; a failed copy is a test failure.
  template <class T>
  std::vector<T> download(size_t count) const {
    std::vector<T> host(count);
    if (count > 0 && fits(count * sizeof(T), "download")) {
      expect_copied(cudaMemcpy(host.data(), ptr_, count * sizeof(T), cudaMemcpyDeviceToHost));
    }
    return host;
  }
  /// `host` into the existing allocation (a test failure, and no copy, when it does not fit).
  template <class T>
  void copy_from(const std::vector<T>& host) {
    if (!host.empty() && fits(host.size() * sizeof(T), "copy_from")) {
      expect_copied(cudaMemcpy(ptr_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
      // A copy from pageable memory may return before its DMA has landed, ordered only with the legacy stream: a
      // kernel on a non-blocking stream could run first, or be overwritten by it. Wait for it here.
      expect_copied(cudaDeviceSynchronize());
    }
  }
  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  static constexpr size_t kSlack = 256;
  static void expect_copied(cudaError_t err) {
    EXPECT_EQ(err, cudaSuccess) << "cudaMemcpy: " << cudaGetErrorString(err);
  }
  /// Whether `n` bytes lie inside the allocation (its slack included); a test failure when not.
  bool fits(size_t n, const char* what) const {
    if (ptr_ != nullptr && n <= bytes_ + kSlack) return true;
    ADD_FAILURE() << what << " of " << n << " bytes: the buffer holds " << (ptr_ == nullptr ? 0 : bytes_ + kSlack);
    return false;
  }
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// The CUDA backend `name` ("cuda" by default) of the default registry, or null (with the reason) when it
/// cannot run here (no such backend in this build, no device, not this device's architecture).
inline const Backend* cuda_backend(std::string* why_not, const std::string& name = "cuda") {
  static const Registry registry = make_default_registry();
  const Backend* b = registry.get(name);
  if (b == nullptr) {
    *why_not = "no '" + name + "' backend in this build";
    return nullptr;
  }
  const Status available = b->available();
  if (!available.ok()) {
    *why_not = name + " backend unavailable: " + available.to_string();
    return nullptr;
  }
  return b;
}

/// The CPU reference backend of the default registry.
inline const Backend* reference_backend() {
  static const Registry registry = make_default_registry();
  return registry.get("reference");
}

#define CACHE_TEST_REQUIRE_CUDA(backend_var)             \
  std::string cache_test_why_;                           \
  const Backend* backend_var = cuda_backend(&cache_test_why_); \
  if (backend_var == nullptr) GTEST_SKIP() << cache_test_why_

/// Uniform floats in [-range, range].
inline std::vector<float> random_floats(std::mt19937_64& rng, size_t n, float range) {
  std::uniform_real_distribution<float> dist(-range, range);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

/// Host values stored in `dtype` (bf16/fp16 bit patterns in 16-bit slots, float32 as is), as raw bytes.
inline std::vector<uint8_t> encode_values(const std::vector<float>& v, DType dtype) {
  std::vector<uint8_t> bytes(v.size() * dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::kFP32) {
      std::memcpy(bytes.data() + 4 * i, &v[i], 4);
    } else {
      const uint16_t h = dtype == DType::kBF16 ? float_to_bf16(v[i]) : float_to_fp16(v[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

/// A deterministic byte pattern (never a fixed value, so a shifted copy would not match by accident).
inline uint8_t pattern_byte(size_t i) { return uint8_t((i * 131u + 7u) ^ (i >> 8)); }
inline std::vector<uint8_t> pattern_bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = pattern_byte(i);
  return v;
}

/// First index where two byte vectors differ, with a readable message; success when equal.
inline ::testing::AssertionResult same_bytes(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                                             const std::string& what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": size " << got.size() << " != " << want.size();
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (mismatches == 0) first = i;
      ++mismatches;
    }
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << mismatches << " of " << got.size()
                                       << " bytes differ, first at byte " << first << " (got 0x" << std::hex
                                       << int(got[first]) << ", want 0x" << int(want[first]) << std::dec << ")";
}

template <class T>
std::vector<uint8_t> as_bytes(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  if (!v.empty()) std::memcpy(b.data(), v.data(), b.size());
  return b;
}

/// cos/sin table [max_pos, d_r] of plain RoPE (theta_i = 10000^(-2i/d_r)); row 0 is exactly [1 .. | 0 ..],
/// so position 0 leaves a vector unchanged.
inline std::vector<float> rope_table(int64_t max_pos, int64_t d_r) {
  std::vector<float> t(size_t(max_pos * d_r));
  const int64_t half = d_r / 2;
  for (int64_t p = 0; p < max_pos; ++p)
    for (int64_t i = 0; i < half; ++i) {
      const double theta = std::pow(10000.0, -2.0 * double(i) / double(d_r));
      t[size_t(p * d_r + i)] = float(std::cos(double(p) * theta));
      t[size_t(p * d_r + half + i)] = float(std::sin(double(p) * theta));
    }
  return t;
}

}  // namespace mlakit::test
