#pragma once
/// @file types.h
/// Element types, devices and the non-owning tensor view every operation takes.

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace mlakit {

/// Element types that cross the API.
enum class DType : uint8_t { kBF16, kFP16, kFP32, kFP8E4M3, kInt32, kInt64, kUInt8 };

/// Bytes per element.
constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::kBF16:
    case DType::kFP16: return 2;
    case DType::kFP32:
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
    case DType::kFP8E4M3:
    case DType::kUInt8: return 1;
  }
  return 0;
}

/// "bf16", "fp16", "fp32", "fp8_e4m3", "int32", "int64", "uint8".
const char* dtype_name(DType t);

enum class DeviceType : uint8_t { kCPU, kCUDA };

/// Where a tensor lives. `index` is the CUDA ordinal (ignored for the CPU).
struct Device {
  DeviceType type = DeviceType::kCPU;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::kCPU, 0}; }
  static constexpr Device cuda(int i = 0) { return {DeviceType::kCUDA, i}; }
  bool is_cpu() const { return type == DeviceType::kCPU; }
  bool is_cuda() const { return type == DeviceType::kCUDA; }
  friend bool operator==(const Device&, const Device&) = default;
};

/// "cpu" or "cuda:N".
std::string device_name(Device d);

/// An opaque stream handle: a `cudaStream_t` for CUDA backends, ignored by the CPU reference.
using Stream = void*;

/// Caller-owned scratch memory on the backend's device (CUTLASS/CUB two-phase style: ask for the size,
/// allocate, pass it in). The caller need not zero it. A workspace holds one call's scratch from its plan to the end
/// of its run: calls that may run at the same time (on two streams, or from two threads) need one each; calls ordered
/// one after another on one stream may share one, across backends too (each plan rewrites what its run reads).
struct Workspace {
  void* data = nullptr;
  size_t bytes = 0;
};

/// Maximum rank of a TensorView.
inline constexpr int kMaxDims = 4;

/// A non-owning view of a strided tensor: pointer, dtype, shape, strides in *elements* (int64).
/// An empty view (`data == nullptr`, `ndim == 0`) means "not given" for optional arguments.
struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kFP32;
  int ndim = 0;
  int64_t shape[kMaxDims] = {0, 0, 0, 0};
  int64_t stride[kMaxDims] = {0, 0, 0, 0};
  Device device{};

  /// A view with row-major contiguous strides.
  static TensorView contiguous(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                               Device device = Device::cpu());
  /// A view with the given strides (in elements), one per dimension of `shape`.
  static TensorView strided(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                            std::initializer_list<int64_t> stride, Device device = Device::cpu());

  bool defined() const { return ndim > 0; }
  int64_t size(int i) const { return shape[i]; }
  /// Product of the shape; 0 when a dimension is 0, INT64_MAX when the product does not fit.
  int64_t numel() const;
  /// Row-major contiguous over all dimensions.
  bool is_contiguous() const;
  /// shape and dtype as text, e.g. "bf16[2, 1, 16, 576]".
  std::string describe() const;

  template <typename T>
  T* ptr() const { return static_cast<T*>(data); }
  /// Address of the element at `idx` (ndim indices), computed in 64 bits.
  template <typename T>
  T* at(std::initializer_list<int64_t> idx) const {
    int64_t off = 0;
    int i = 0;
    for (int64_t v : idx) off += v * stride[i++];
    return static_cast<T*>(data) + off;
  }
};

}  // namespace mlakit
