#include "workspace.h"

#include <string>

#if defined(MLAKIT_PYTHON_CUDA)
#include <cuda_runtime_api.h>
#endif

namespace mlakit::py {

OwnedWorkspace& OwnedWorkspace::operator=(OwnedWorkspace&& o) noexcept {
  if (this != &o) {
    release();
    data_ = o.data_;
    bytes_ = o.bytes_;
    device_ = o.device_;
    cuda_owned_ = o.cuda_owned_;
    host_ = std::move(o.host_);
    caller_ = std::move(o.caller_);
    o.data_ = nullptr;
    o.bytes_ = 0;
    o.cuda_owned_ = false;
  }
  return *this;
}

OwnedWorkspace::~OwnedWorkspace() { release(); }

void OwnedWorkspace::release() {
#if defined(MLAKIT_PYTHON_CUDA)
  if (cuda_owned_ && data_ != nullptr) {
    int previous = 0;
    if (cudaGetDevice(&previous) == cudaSuccess) {
      cudaSetDevice(device_.index);
      cudaFree(data_);  // a destructor cannot report; a failure here leaks at worst
      cudaSetDevice(previous);
    }
  }
#endif
  data_ = nullptr;
  bytes_ = 0;
  cuda_owned_ = false;
  host_.reset();
}

OwnedWorkspace OwnedWorkspace::make(Device device, size_t bytes, nb::handle array) {
  OwnedWorkspace ws;
  ws.device_ = device;
  if (array.is_valid() && !array.is_none()) {
    nb::object given = nb::borrow(array);
    if (PyCallable_Check(array.ptr()) != 0) {
      if (bytes == 0) return ws;  // nothing to ask the framework for
      given = array(bytes);       // a framework array, kept alive by caller_ below
      ws.caller_.keep(given);
    }
    const TensorView v = ws.caller_.view(given, "workspace", Access::kWrite);
    const size_t have = size_t(v.numel()) * dtype_size(v.dtype);
    if (v.device != device || !v.is_contiguous() || have < bytes) {
      throw_conversion("workspace", v.describe() + " on " + device_name(v.device) + ": must be a contiguous array of at least " +
                                        std::to_string(bytes) + " bytes on " + device_name(device));
    }
    ws.data_ = v.data;
    ws.bytes_ = have;
    return ws;
  }
  if (bytes == 0) return ws;
  if (device.is_cpu()) {
    ws.host_ = std::make_unique<std::byte[]>(bytes);
    ws.data_ = ws.host_.get();
    ws.bytes_ = bytes;
    return ws;
  }
#if defined(MLAKIT_PYTHON_CUDA)
  int previous = 0;
  cudaError_t err = cudaGetDevice(&previous);
  if (err == cudaSuccess) err = cudaSetDevice(device.index);
  if (err == cudaSuccess) err = cudaMalloc(&ws.data_, bytes);
  cudaSetDevice(previous);
  if (err != cudaSuccess) {
    throw_if_failed(Status::cuda_error("workspace: cudaMalloc of " + std::to_string(bytes) + " bytes on " +
                                       device_name(device) + " failed: " + cudaGetErrorString(err)));
  }
  ws.bytes_ = bytes;
  ws.cuda_owned_ = true;
  return ws;
#else
  throw_if_failed(Status::not_supported("workspace: this mlakit build has no CUDA support; cannot allocate " +
                                        std::to_string(bytes) + " bytes on " + device_name(device)));
  return ws;
#endif
}

}  // namespace mlakit::py
