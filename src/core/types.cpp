#include "mlakit/types.h"

#include "mlakit/kv_format.h"
#include "mlakit/problems.h"

namespace mlakit {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kBF16: return "bf16";
    case DType::kFP16: return "fp16";
    case DType::kFP32: return "fp32";
    case DType::kFP8E4M3: return "fp8_e4m3";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
    case DType::kUInt8: return "uint8";
  }
  return "unknown";
}

const char* kv_format_name(KvFormat f) {
  switch (f) {
    case KvFormat::kBF16: return "bf16";
    case KvFormat::kFP16: return "fp16";
    case KvFormat::kFP8E4M3: return "fp8_e4m3";
    case KvFormat::kFP8DsMla: return "fp8_ds_mla";
  }
  return "unknown";
}

const char* rope_style_name(RopeStyle s) { return s == RopeStyle::kNeox ? "neox" : "interleaved"; }

std::string device_name(Device d) {
  return d.is_cpu() ? std::string("cpu") : "cuda:" + std::to_string(d.index);
}

TensorView TensorView::contiguous(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                                  Device device) {
  TensorView t;
  t.data = const_cast<void*>(data);  // views are non-owning; constness is the operation's contract
  t.dtype = dtype;
  t.device = device;
  t.ndim = static_cast<int>(shape.size());
  int i = 0;
  for (int64_t s : shape) t.shape[i++] = s;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.stride[d] = stride;
    stride *= t.shape[d];
  }
  return t;
}

TensorView TensorView::strided(const void* data, DType dtype, std::initializer_list<int64_t> shape,
                               std::initializer_list<int64_t> stride, Device device) {
  TensorView t = contiguous(data, dtype, shape, device);
  int i = 0;
  for (int64_t s : stride) t.stride[i++] = s;
  return t;
}

int64_t TensorView::numel() const {
  int64_t n = ndim > 0 ? 1 : 0;
  for (int i = 0; i < ndim; ++i) n *= shape[i];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    expected *= shape[d];
  }
  return true;
}

std::string TensorView::describe() const {
  std::string s = std::string(dtype_name(dtype)) + "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

KvCacheView KvCacheView::contiguous(const void* data, KvFormat format, int64_t num_pages, int64_t page_size,
                                    MlaDims dims, Device device) {
  KvCacheView kv;
  kv.format = format;
  kv.dims = dims;
  kv.pages = TensorView::contiguous(data, DType::kUInt8,
                                    {num_pages, page_size, kv_row_bytes(format, dims.d_c, dims.d_r)}, device);
  return kv;
}

}  // namespace mlakit
