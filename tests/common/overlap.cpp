// Overlap messages (overlap.h).

#include "common/overlap.h"

#include <cstdint>
#include <cstdio>

namespace mlakit::test {

std::string byte_span(const TensorView& t) {
  int64_t last = 0;
  for (int i = 0; i < t.ndim; ++i) last += (t.shape[i] - 1) * t.stride[i];
  const auto begin = reinterpret_cast<uintptr_t>(t.data);
  const uintptr_t end = begin + uintptr_t((last + 1) * int64_t(dtype_size(t.dtype)));
  char text[64];
  std::snprintf(text, sizeof text, "[0x%llx, 0x%llx)", static_cast<unsigned long long>(begin),
                static_cast<unsigned long long>(end));
  return text;
}

std::string overlap(const std::string& out, const TensorView& a, const std::string& in, const TensorView& b,
                    const std::string& rule) {
  return out + ": overlaps " + in + " (bytes " + byte_span(a) + " and " + byte_span(b) + "): " + rule;
}

}  // namespace mlakit::test
