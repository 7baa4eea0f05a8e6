#include "cuda/cache/common/host_util.h"

#include <cstdio>

#include "cuda/common/check.h"
#include "mlakit/problems.h"

namespace mlakit::cuda::cache {

Status unsupported(std::string_view field, std::string_view value, std::string_view rule) {
  return Status::not_supported(std::string(field) + "=" + std::string(value) + ": " + std::string(rule));
}

Status unsupported(std::string_view field, int64_t value, std::string_view rule) {
  return unsupported(field, std::to_string(value), rule);
}

Status require_aligned(std::string_view field, const void* ptr, int64_t bytes, std::string_view why) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  if (address % uint64_t(bytes) == 0) return {};
  char text[32];
  std::snprintf(text, sizeof text, "0x%llx", static_cast<unsigned long long>(address));
  return unsupported(field, text,
                     "must be " + std::to_string(bytes) + "-byte aligned (" + std::string(why) + ")");
}

Status require_multiple(std::string_view field, int64_t value, int64_t multiple, std::string_view unit,
                        std::string_view why) {
  if (value % multiple == 0) return {};
  return unsupported(field, value,
                     "must be a multiple of " + std::to_string(multiple) + " " + std::string(unit) + " (" +
                         std::string(why) + ")");
}

Status require_vector_rows(const TensorView& t, std::string_view name, int64_t bytes, std::string_view why) {
  MLAKIT_TRY(require_aligned(std::string(name) + ".data", t.data, bytes, why));
  const int64_t elems = bytes / int64_t(dtype_size(t.dtype));
  for (int i = 0; i + 1 < t.ndim; ++i) {
    if (t.shape[i] <= 1) continue;  // a dimension of one never steps, its stride is irrelevant
    MLAKIT_TRY(require_multiple(std::string(name) + ".stride[" + std::to_string(i) + "]", t.stride[i], elems,
                                "elements", why));
  }
  return {};
}

Status require_shift_page_size(int64_t page_size, std::string_view kernel) {
  if (page_size >= kMinPageSize && page_size <= kMaxPageSize && (page_size & (page_size - 1)) == 0) return {};
  return unsupported("cache.page_size", page_size,
                     "must be a power of two in [1, 256] for the cuda " + std::string(kernel) +
                         " kernel (it shifts slots into pages; the reference backend takes any page size)");
}

int log2_exact(int64_t power_of_two) {
  int r = 0;
  while ((int64_t(1) << r) < power_of_two) ++r;
  return r;
}

}  // namespace mlakit::cuda::cache
