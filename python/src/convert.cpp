#include "convert.h"

#include "cache_layout.h"

#include <cstring>
#include <optional>
#include <string>

namespace mlakit::py {
namespace {

// Python exception types created in register_exceptions(); they live as long as the module.
PyObject* g_not_supported_error = nullptr;
PyObject* g_cuda_error = nullptr;

std::string type_name_of(nb::handle obj) { return Py_TYPE(obj.ptr())->tp_name; }

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

// What the torch path needs from torch, looked up once torch has been imported by the caller (MLAKit never
// imports it itself here) and kept for the life of the interpreter: one attribute lookup per call instead of an
// import and several lookups per array.
struct TorchObjects {
  PyObject* tensor_type = nullptr;  // torch.Tensor
  PyObject* fp8_e4m3 = nullptr;     // torch.float8_e4m3fn
  PyObject* uint8 = nullptr;        // torch.uint8
  PyObject* to_dlpack = nullptr;    // torch.utils.dlpack.to_dlpack: C code, no stream synchronisation
  PyObject* raw_stream = nullptr;   // torch._C._cuda_getCurrentRawStream(index) -> int, or null (CPU-only torch)
};

const TorchObjects* torch_objects() {
  enum class State { kNotTried, kReady, kFailed };
  static TorchObjects objects;
  static State state = State::kNotTried;
  if (state == State::kNotTried) {
    PyObject* torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");  // borrowed
    if (torch == nullptr) return nullptr;  // not imported yet: ask again next time
    objects.tensor_type = PyObject_GetAttrString(torch, "Tensor");
    objects.fp8_e4m3 = PyObject_GetAttrString(torch, "float8_e4m3fn");
    objects.uint8 = PyObject_GetAttrString(torch, "uint8");
    if (PyObject* dlpack = PyImport_ImportModule("torch.utils.dlpack"); dlpack != nullptr) {
      objects.to_dlpack = PyObject_GetAttrString(dlpack, "to_dlpack");
      Py_DECREF(dlpack);
    }
    // What torch's own compiled code calls for the current stream: an int, without building a
    // torch.cuda.Stream object per call. Optional: resolve_stream() falls back to torch.cuda.current_stream.
    if (PyObject* c_module = PyObject_GetAttrString(torch, "_C"); c_module != nullptr) {
      objects.raw_stream = PyObject_GetAttrString(c_module, "_cuda_getCurrentRawStream");
      Py_DECREF(c_module);
    }
    PyErr_Clear();
    // A torch without the required ones: its tensors go through the generic DLPack path.
    const bool complete = objects.tensor_type != nullptr && objects.fp8_e4m3 != nullptr &&
                          objects.uint8 != nullptr && objects.to_dlpack != nullptr;
    state = complete ? State::kReady : State::kFailed;
  }
  return state == State::kReady ? &objects : nullptr;
}

bool is_torch_tensor(nb::handle obj) {
  const TorchObjects* t = torch_objects();
  return t != nullptr && PyObject_IsInstance(obj.ptr(), t->tensor_type) == 1;
}

// An argument after framework-specific preparation: the object nanobind imports, and the MLAKit dtype
// when the DLPack dtype cannot say it (numpy has no native bf16 / fp8: ml_dtypes arrays are imported
// through an integer view of the same bytes).
struct Prepared {
  nb::object obj;
  std::optional<DType> dtype;
  Framework framework = Framework::kOther;
};

Prepared prepare(nb::handle obj, const char* field) {
  Prepared p{nb::borrow(obj), std::nullopt, Framework::kOther};
  const char* tp = Py_TYPE(obj.ptr())->tp_name;
  if (starts_with(tp, "numpy.")) {
    p.framework = Framework::kNumpy;
    const std::string dtype = nb::cast<std::string>(obj.attr("dtype").attr("name"));
    if (dtype == "bfloat16") {
      p.obj = obj.attr("view")("uint16");
      p.dtype = DType::kBF16;
    } else if (dtype == "float8_e4m3fn") {
      p.obj = obj.attr("view")("uint8");
      p.dtype = DType::kFP8E4M3;
    }
  } else if (starts_with(tp, "cupy")) {
    p.framework = Framework::kCupy;
  } else if (is_torch_tensor(obj)) {
    p.framework = Framework::kTorch;
    if (nb::cast<bool>(obj.attr("requires_grad"))) {
      throw_conversion(field, "tensor requires grad; MLAKit operations have no backward "
                              "(call them under torch.no_grad() or pass tensor.detach())");
    }
    const TorchObjects* t = torch_objects();
    if (obj.attr("dtype").is(nb::handle(t->fp8_e4m3))) {
      p.obj = obj.attr("view")(nb::handle(t->uint8));
      p.dtype = DType::kFP8E4M3;
    }
    // to_dlpack rather than Tensor.__dlpack__(): the same capsule, made in C without the Python wrapper, and
    // without any stream synchronisation. MLAKit runs on the stream the caller names (or torch's current one);
    // __dlpack__'s default (make the legacy default stream wait on the current one) would only cost time and
    // break CUDA graph capture, where the legacy stream may not be touched.
    p.obj = nb::handle(t->to_dlpack)(p.obj);
  }
  return p;
}

DType map_dtype(nb::dlpack::dtype t, const char* field) {
  using Code = nb::dlpack::dtype_code;
  const auto code = static_cast<Code>(t.code);
  if (t.lanes == 1) {
    if (code == Code::Bfloat && t.bits == 16) return DType::kBF16;
    if (code == Code::Float && t.bits == 16) return DType::kFP16;
    if (code == Code::Float && t.bits == 32) return DType::kFP32;
    if (code == Code::Float8_E4M3FN && t.bits == 8) return DType::kFP8E4M3;
    if (code == Code::Int && t.bits == 32) return DType::kInt32;
    if (code == Code::Int && t.bits == 64) return DType::kInt64;
    if (code == Code::UInt && t.bits == 8) return DType::kUInt8;
  }
  const char* kind = code == Code::Int ? "int" : code == Code::UInt ? "uint" : code == Code::Float ? "float"
                    : code == Code::Bfloat ? "bfloat" : code == Code::Bool ? "bool" : "dlpack_code_";
  const std::string name = std::string(kind) + (code == Code::Bool ? "" : std::to_string(t.code <= 6 ? t.bits : t.code)) +
                           (t.lanes == 1 ? "" : "x" + std::to_string(t.lanes));
  throw_conversion(field, "dtype " + name + " has no MLAKit equivalent (bf16, fp16, float32, float8_e4m3fn, int32, "
                              "int64, uint8)");
}

Device map_device(int type, int id, const char* field) {
  if (type == nb::device::cpu::value || type == nb::device::cuda_host::value) return Device::cpu();
  if (type == nb::device::cuda::value || type == nb::device::cuda_managed::value) return Device::cuda(id);
  throw_conversion(field, "DLPack device type " + std::to_string(type) + " is neither CPU nor CUDA");
}

template <typename Array>
TensorView to_view(const Array& a, std::optional<DType> dtype, const char* field) {
  if (a.ndim() > size_t(kMaxDims)) {
    throw_conversion(field, "rank " + std::to_string(a.ndim()) + " exceeds MLAKit's maximum of " +
                                std::to_string(kMaxDims));
  }
  TensorView v;
  v.data = const_cast<void*>(static_cast<const void*>(a.data()));
  v.dtype = dtype ? *dtype : map_dtype(a.dtype(), field);
  v.ndim = int(a.ndim());
  for (int i = 0; i < v.ndim; ++i) {
    v.shape[i] = int64_t(a.shape(size_t(i)));
    v.stride[i] = a.stride(size_t(i));
  }
  v.device = map_device(a.device_type(), a.device_id(), field);
  return v;
}

void translate(const std::exception_ptr& e, void*) {
  try {
    std::rethrow_exception(e);
  } catch (const StatusError& err) {
    PyObject* type = PyExc_RuntimeError;
    switch (err.status.code()) {
      case StatusCode::kInvalidArgument: type = PyExc_ValueError; break;
      case StatusCode::kNotSupported: type = g_not_supported_error; break;
      case StatusCode::kCudaError: type = g_cuda_error; break;
      default: break;
    }
    PyErr_SetString(type, err.status.message().c_str());
  }
}

}  // namespace

void throw_if_failed(const Status& s) {
  if (!s.ok()) throw StatusError{s};
}

void throw_conversion(const char* field, const std::string& what) {
  throw nb::value_error((std::string(field) + ": " + what).c_str());
}

void register_exceptions(nb::module_& m) {
  g_not_supported_error = PyErr_NewExceptionWithDoc(
      "mlakit.NotSupportedError",
      "The call is valid but the chosen backend (or every backend) cannot serve it; the message says why.",
      PyExc_NotImplementedError, nullptr);
  g_cuda_error = PyErr_NewExceptionWithDoc("mlakit.CudaError", "A CUDA API call or kernel launch failed.",
                                           PyExc_RuntimeError, nullptr);
  m.attr("NotSupportedError") = nb::handle(g_not_supported_error);
  m.attr("CudaError") = nb::handle(g_cuda_error);
  nb::register_exception_translator(translate);
}

TensorView ArgHolder::view(nb::handle obj, const char* field, Access access) {
  // None is "not given": validate() names the field when it is required, in its own words.
  if (!obj.is_valid() || obj.is_none()) return {};
  Prepared p = prepare(obj, field);
  TensorView v;
  if (access == Access::kWrite) {
    nb::ndarray<> a;
    if (!nb::try_cast(p.obj, a, /*convert=*/false)) {
      nb::ndarray<nb::ro> ro;
      if (nb::try_cast(p.obj, ro, false)) throw_conversion(field, "array is read-only, but this operation writes it");
      throw nb::type_error((std::string(field) + ": expected an array (numpy, torch, cupy or any DLPack producer), got " +
                            type_name_of(obj)).c_str());
    }
    v = to_view(a, p.dtype, field);
    writable_.push_back(std::move(a));
  } else {
    nb::ndarray<nb::ro> a;
    if (!nb::try_cast(p.obj, a, false)) {
      throw nb::type_error((std::string(field) + ": expected an array (numpy, torch, cupy or any DLPack producer), got " +
                            type_name_of(obj)).c_str());
    }
    v = to_view(a, p.dtype, field);
    readable_.push_back(std::move(a));
  }
  if (v.device.is_cuda() && cuda_index_ < 0) {
    cuda_framework_ = p.framework;
    cuda_index_ = v.device.index;
  }
  return v;
}

TensorView ArgHolder::optional(nb::handle obj, const char* field, Access access) { return view(obj, field, access); }

Stream resolve_stream(nb::handle stream, const ArgHolder& args, Device device) {
  if (stream.is_valid() && !stream.is_none()) {
    // Accept a raw handle (int) or a stream object: torch.cuda.Stream (.cuda_stream), cupy (.ptr).
    nb::handle h = stream;
    nb::object attr;
    if (nb::hasattr(stream, "cuda_stream")) {
      attr = stream.attr("cuda_stream");
      h = attr;
    } else if (nb::hasattr(stream, "ptr")) {
      attr = stream.attr("ptr");
      h = attr;
    }
    return reinterpret_cast<Stream>(nb::cast<intptr_t>(h));
  }
  if (device.is_cpu()) return nullptr;
  switch (args.cuda_framework()) {
    case Framework::kTorch: {
      const TorchObjects* t = torch_objects();
      if (t != nullptr && t->raw_stream != nullptr) {
        return reinterpret_cast<Stream>(nb::cast<intptr_t>(nb::handle(t->raw_stream)(args.cuda_index())));
      }
      nb::object cuda = nb::module_::import_("torch").attr("cuda");
      return reinterpret_cast<Stream>(
          nb::cast<intptr_t>(cuda.attr("current_stream")(args.cuda_index()).attr("cuda_stream")));
    }
    case Framework::kCupy: {
      // cupy's current stream is per device: ask with the arrays' device current (a cupy.cuda.Device context).
      nb::object cuda = nb::module_::import_("cupy").attr("cuda");
      nb::object on_device = cuda.attr("Device")(args.cuda_index());
      on_device.attr("__enter__")();
      intptr_t ptr = 0;
      try {
        ptr = nb::cast<intptr_t>(cuda.attr("get_current_stream")().attr("ptr"));
      } catch (...) {
        on_device.attr("__exit__")(nb::none(), nb::none(), nb::none());
        throw;
      }
      on_device.attr("__exit__")(nb::none(), nb::none(), nb::none());
      return reinterpret_cast<Stream>(ptr);
    }
    default: return nullptr;  // the legacy default stream
  }
}

RopeStyle parse_rope_style(const std::string& s) {
  if (s == "interleaved") return RopeStyle::kInterleaved;
  if (s == "neox") return RopeStyle::kNeox;
  throw nb::value_error(("rope_style='" + s + "': must be 'interleaved' or 'neox'").c_str());
}

KvFormat parse_kv_format(const std::string& s) {
  KvFormat f{};
  throw_if_failed(parse_kv_format(std::string_view(s), "format", &f));
  return f;
}

}  // namespace mlakit::py
