#pragma once
// Conversion between Python objects and MLAKit's C++ types: DLPack arrays -> TensorView, Status ->
// Python exceptions, stream handles. This layer only converts; every rule about shapes, dtypes and
// strides is checked once, by Problem::validate() in C++, whose message is raised unchanged.

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <vector>

#include "mlakit/mlakit.h"

namespace mlakit::py {

namespace nb = nanobind;

/// Raised (as the Python exception matching its code) when a C++ entry point returns a failed Status.
struct StatusError {
  Status status;
};

/// Throws StatusError when `s` failed. invalid_argument -> ValueError, not_supported ->
/// mlakit.NotSupportedError (a NotImplementedError), cuda_error -> mlakit.CudaError (a RuntimeError),
/// internal -> RuntimeError. The message is the C++ one ("field=value: rule").
void throw_if_failed(const Status& s);
/// Runs `call` (returning a Status) with the GIL released, so other Python threads run while a kernel is
/// launched or the CPU reference computes, then raises as throw_if_failed does.
template <typename Call>
void call_without_gil(Call&& call) {
  Status status;
  {
    nb::gil_scoped_release release;
    status = call();
  }
  throw_if_failed(status);
}
/// Raises ValueError("<field>: <what>") for conversion problems the C++ API cannot express
/// (a float64 array, a 5-D array, an object that is not an array).
[[noreturn]] void throw_conversion(const char* field, const std::string& what);

/// Registers NotSupportedError and CudaError on `m` and the StatusError translator.
void register_exceptions(nb::module_& m);

/// Whether the operation writes through the view (outputs, caches, in-place inputs).
enum class Access { kRead, kWrite };

/// Array framework of an argument, used to find the caller's current CUDA stream.
enum class Framework { kOther, kNumpy, kTorch, kCupy };

/// Imports the arrays of one call and keeps them alive until the call returns (the views hold raw
/// pointers into them). Not copyable: views must never outlive their holder.
class ArgHolder {
 public:
  ArgHolder() = default;
  ArgHolder(const ArgHolder&) = delete;
  ArgHolder& operator=(const ArgHolder&) = delete;
  ArgHolder(ArgHolder&&) = default;
  ArgHolder& operator=(ArgHolder&&) = default;

  /// A required array. Raises TypeError when `obj` is not an array.
  TensorView view(nb::handle obj, const char* field, Access access);
  /// An optional array: None gives the empty view ("not given").
  TensorView optional(nb::handle obj, const char* field, Access access);

  /// Keeps an object (a KvCache made for this call, a Python object) alive as long as the holder.
  void keep(std::shared_ptr<const void> p) { kept_.push_back(std::move(p)); }
  void keep(nb::object o) { objects_.push_back(std::move(o)); }
  /// Adopts `other`'s CUDA framework when this holder has seen no CUDA array yet.
  void note_cuda_framework(const ArgHolder& other) {
    if (cuda_index_ < 0) {
      cuda_framework_ = other.cuda_framework_;
      cuda_index_ = other.cuda_index_;
    }
  }

  /// Framework and device of the first CUDA array seen (for the current-stream lookup).
  Framework cuda_framework() const { return cuda_framework_; }
  int cuda_index() const { return cuda_index_; }

 private:
  std::vector<nb::ndarray<>> writable_;
  std::vector<nb::ndarray<nb::ro>> readable_;
  std::vector<std::shared_ptr<const void>> kept_;
  std::vector<nb::object> objects_;
  Framework cuda_framework_ = Framework::kOther;
  int cuda_index_ = -1;
};

/// The stream to run on: the explicit `stream` (an int, e.g. torch's `cuda_stream`) when given; else,
/// for CUDA arrays, the current stream of their framework (torch, cupy); else the default stream (0).
Stream resolve_stream(nb::handle stream, const ArgHolder& args, Device device);

/// Parses "interleaved" / "neox".
RopeStyle parse_rope_style(const std::string& s);
/// Parses "bf16", "fp16", "fp8_e4m3", "fp8_ds_mla".
KvFormat parse_kv_format(const std::string& s);

}  // namespace mlakit::py
