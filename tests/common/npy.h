#pragma once
// Minimal reader of NumPy .npy files (format versions 1.0, 2.0 and 3.0), enough for the golden vectors in
// MLAKIT_TESTDATA_DIR. Only little-endian, C-ordered arrays of the dtypes below are accepted; anything else
// is reported through the error string so a test can ASSERT on it with a readable message.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace mlakit::test {

/// One array read from a .npy file: its dtype descriptor, shape and the raw element bytes (row-major).
struct NpyArray {
  std::string dtype;            // "<u2" (bf16 bit patterns), "<f4", "<f8", "<i4", "<i8" or "|u1"
  std::vector<int64_t> shape;   // empty for a 0-d array
  std::size_t item_bytes = 0;   // 2, 4, 8 or 1, from dtype
  std::vector<uint8_t> data;    // numel() * item_bytes bytes

  int64_t numel() const;
  /// "[18, 64, 1, 656]", for messages.
  std::string shape_string() const;

  /// Element i as T (memcpy, so unaligned storage is fine). T must have item_bytes bytes.
  template <class T>
  T at(int64_t i) const {
    T v;
    std::memcpy(&v, data.data() + static_cast<std::size_t>(i) * sizeof(T), sizeof(T));
    return v;
  }
  /// All elements copied into a vector of T (sizeof(T) must equal item_bytes).
  template <class T>
  std::vector<T> to_vector() const {
    std::vector<T> v(data.size() / sizeof(T));
    if (!v.empty()) std::memcpy(v.data(), data.data(), v.size() * sizeof(T));
    return v;
  }
};

/// Reads `path`. Returns false and sets *error (file, what is wrong) on a missing file, a bad header,
/// big-endian or Fortran order, an unsupported dtype or a truncated payload.
bool load_npy(const std::string& path, NpyArray* out, std::string* error);

/// load_npy plus checks that dtype and shape are the expected ones (an empty expected_shape skips the shape
/// check). Returns false with a message naming the file, the expected and the found value.
bool load_npy_checked(const std::string& path, const std::string& expected_dtype,
                      const std::vector<int64_t>& expected_shape, NpyArray* out, std::string* error);

}  // namespace mlakit::test
