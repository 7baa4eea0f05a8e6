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
    case KvFormat::kFP8DsV4: return "fp8_ds_v4";
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
  // A stride past int64 saturates (validate() then rejects the tensor's extent) instead of overflowing.
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.stride[d] = stride;
    if (__builtin_mul_overflow(stride, t.shape[d], &stride)) stride = INT64_MAX;
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
  if (ndim <= 0 || ndim > kMaxDims) return 0;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] == 0) return 0;
  }
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) {
    if (__builtin_mul_overflow(n, shape[i], &n)) return INT64_MAX;
  }
  return n;
}

bool TensorView::is_contiguous() const {
  if (ndim < 0 || ndim > kMaxDims) return false;
  int64_t expected = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    if (shape[d] != 1 && stride[d] != expected) return false;
    if (__builtin_mul_overflow(expected, shape[d], &expected)) return d == 0;  // only the outermost may exceed
  }
  return true;
}

std::string TensorView::describe() const {
  std::string s = std::string(dtype_name(dtype)) + "[";
  for (int i = 0; i < ndim && i < kMaxDims; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

KvCacheView KvCacheView::contiguous(const void* data, KvFormat format, int64_t num_pages, int64_t page_size,
                                    MlaDims dims, Device device) {
  KvCacheView kv;
  kv.format = format;
  kv.dims = dims;
  kv.pages = TensorView::contiguous(data, DType::kUInt8,
                                    {num_pages, page_size, kv_row_bytes(format, dims.d_c, dims.d_r)}, device);
  if (format == KvFormat::kFP8DsV4) kv.pages.stride[0] = ds_v4::packed_page_bytes(page_size);  // FlashMLA's padding
  return kv;
}

}  // namespace mlakit
