#include "cache_layout.h"

#include <string>

namespace mlakit::py {
namespace {

// FlashMLA's cache is [num_pages, page_size, h_kv, row] with h_kv = 1 (MLA has one latent KV head).
constexpr int kFlashLayoutRank = 4;
constexpr int kHeadDim = 2;
constexpr int kCacheRank = 3;

}  // namespace

Status to_cache_bytes(TensorView& v, const char* name) {
  if (v.ndim == kFlashLayoutRank) {
    if (v.shape[kHeadDim] != 1) {
      return Status::invalid(std::string(name) + ": 4-D cache " + v.describe() +
                                      ": dimension 2 (KV heads) must be 1; MLA caches hold one latent head");
    }
    v.shape[2] = v.shape[3];
    v.stride[2] = v.stride[3];
    v.shape[3] = 0;
    v.stride[3] = 0;
    v.ndim = kCacheRank;
  }
  if (v.dtype == DType::kUInt8 || v.ndim != kCacheRank) return {};
  const int64_t itemsize = int64_t(dtype_size(v.dtype));
  v.shape[2] *= itemsize;
  v.stride[0] *= itemsize;
  v.stride[1] *= itemsize;
  if (v.stride[2] != 1) v.stride[2] *= itemsize;
  v.dtype = DType::kUInt8;
  return {};
}

Status infer_kv_format(DType element_dtype, const char* name, KvFormat* format) {
  switch (element_dtype) {
    case DType::kBF16: *format = KvFormat::kBF16; return {};
    case DType::kFP16: *format = KvFormat::kFP16; return {};
    case DType::kFP8E4M3: *format = KvFormat::kFP8E4M3; return {};
    default:
      return Status::invalid(std::string(name) + ": format is required for a " + dtype_name(element_dtype) +
                                      " cache (one of bf16, fp16, fp8_e4m3, fp8_ds_mla, fp8_ds_v4)");
  }
}

Status parse_kv_format(std::string_view s, const char* field, KvFormat* format) {
  for (KvFormat f : {KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3, KvFormat::kFP8DsMla, KvFormat::kFP8DsV4}) {
    if (s == kv_format_name(f)) {
      *format = f;
      return {};
    }
  }
  return Status::invalid(std::string(field) + "='" + std::string(s) +
                                  "': must be one of bf16, fp16, fp8_e4m3, fp8_ds_mla, fp8_ds_v4");
}

}  // namespace mlakit::py
