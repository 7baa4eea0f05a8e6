#pragma once
// Scratch memory owned by a binding object (a DecodePlan, or one call of decode/sparse_decode):
// host memory for CPU backends, cudaMalloc'd memory for CUDA ones, or a caller's uint8 array.

#include <cstddef>
#include <memory>

#include "convert.h"

namespace mlakit::py {

class OwnedWorkspace {
 public:
  OwnedWorkspace() = default;
  OwnedWorkspace(const OwnedWorkspace&) = delete;
  OwnedWorkspace& operator=(const OwnedWorkspace&) = delete;
  OwnedWorkspace(OwnedWorkspace&& o) noexcept { *this = std::move(o); }
  OwnedWorkspace& operator=(OwnedWorkspace&& o) noexcept;
  ~OwnedWorkspace();

  /// `bytes` of scratch on `device`. With `array` given (a uint8 array on that device), uses it instead
  /// of allocating, and raises ValueError when it is smaller than `bytes`. `array` may also be a callable
  /// that takes the byte count and returns such an array (a framework's allocator, e.g. `lambda n:
  /// torch.empty(n, dtype=torch.uint8, device=...)`), so that a caller who owns no workspace gets one from
  /// its framework in the same call instead of asking for the size first. Call with the GIL held.
  static OwnedWorkspace make(Device device, size_t bytes, nb::handle array);

  Workspace get() const { return {data_, bytes_}; }
  size_t bytes() const { return bytes_; }

 private:
  void release();

  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_{};
  bool cuda_owned_ = false;
  std::unique_ptr<std::byte[]> host_;
  ArgHolder caller_;  // keeps a caller-provided array alive
};

}  // namespace mlakit::py
