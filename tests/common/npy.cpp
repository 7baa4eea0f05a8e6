#include "common/npy.h"

#include <bit>
#include <fstream>
#include <iterator>
#include <sstream>

namespace mlakit::test {
namespace {

static_assert(std::endian::native == std::endian::little, "npy reader assumes a little-endian host");

// File layout: 6-byte magic "\x93NUMPY", 1-byte major, 1-byte minor version, header length (2 bytes little
// endian in v1, 4 bytes in v2/v3), then an ASCII Python dict literal padded with spaces and a newline.
constexpr char kMagic[] = "\x93NUMPY";
constexpr std::size_t kMagicBytes = 6;
constexpr std::size_t kPreambleV1 = kMagicBytes + 2 + 2;
constexpr std::size_t kPreambleV2 = kMagicBytes + 2 + 4;

struct DTypeInfo {
  const char* descr;
  std::size_t bytes;
};
constexpr DTypeInfo kSupported[] = {{"<u2", 2}, {"<f4", 4}, {"<f8", 8}, {"<i4", 4}, {"<i8", 8}, {"|u1", 1}};

// Value of 'key' in the header dict: the text after "'key':" up to the matching end (a quoted string, a
// tuple in parentheses, or a bare word such as False).
bool dict_value(const std::string& header, const std::string& key, std::string* value) {
  const std::string needle = "'" + key + "'";
  std::size_t pos = header.find(needle);
  if (pos == std::string::npos) return false;
  pos = header.find(':', pos + needle.size());
  if (pos == std::string::npos) return false;
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  if (pos >= header.size()) return false;
  std::size_t end;
  if (header[pos] == '\'') {
    end = header.find('\'', pos + 1);
    if (end == std::string::npos) return false;
    *value = header.substr(pos + 1, end - pos - 1);
  } else if (header[pos] == '(') {
    end = header.find(')', pos);
    if (end == std::string::npos) return false;
    *value = header.substr(pos + 1, end - pos - 1);
  } else {
    end = header.find_first_of(",}", pos);
    if (end == std::string::npos) return false;
    *value = header.substr(pos, end - pos);
    while (!value->empty() && value->back() == ' ') value->pop_back();
  }
  return true;
}

bool parse_shape(const std::string& text, std::vector<int64_t>* shape) {
  shape->clear();
  std::size_t pos = 0;
  while (pos < text.size()) {
    while (pos < text.size() && (text[pos] == ' ' || text[pos] == ',')) ++pos;
    if (pos >= text.size()) break;
    std::size_t used = 0;
    long long dim = 0;
    try {
      dim = std::stoll(text.substr(pos), &used);
    } catch (...) {
      return false;
    }
    if (used == 0 || dim < 0) return false;
    shape->push_back(dim);
    pos += used;
  }
  return true;
}

bool fail(std::string* error, const std::string& path, const std::string& what) {
  if (error) *error = path + ": " + what;
  return false;
}

}  // namespace

int64_t NpyArray::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string NpyArray::shape_string() const {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

bool load_npy(const std::string& path, NpyArray* out, std::string* error) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return fail(error, path, "cannot open file");
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());

  if (bytes.size() < kPreambleV1 || std::memcmp(bytes.data(), kMagic, kMagicBytes) != 0)
    return fail(error, path, "not a .npy file (magic \\x93NUMPY missing)");
  const int major = bytes[kMagicBytes];
  std::size_t header_len = 0;
  std::size_t preamble = 0;
  if (major == 1) {
    header_len = bytes[8] | (std::size_t{bytes[9]} << 8);
    preamble = kPreambleV1;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < kPreambleV2) return fail(error, path, "truncated header");
    header_len = bytes[8] | (std::size_t{bytes[9]} << 8) | (std::size_t{bytes[10]} << 16) |
                 (std::size_t{bytes[11]} << 24);
    preamble = kPreambleV2;
  } else {
    return fail(error, path, "unsupported .npy format version " + std::to_string(major));
  }
  if (bytes.size() < preamble + header_len) return fail(error, path, "truncated header");
  const std::string header(reinterpret_cast<const char*>(bytes.data() + preamble), header_len);

  std::string descr, fortran, shape_text;
  if (!dict_value(header, "descr", &descr) || !dict_value(header, "fortran_order", &fortran) ||
      !dict_value(header, "shape", &shape_text))
    return fail(error, path, "header lacks descr/fortran_order/shape: " + header);
  if (fortran != "False") return fail(error, path, "fortran_order=" + fortran + ": only C order is supported");

  NpyArray result;
  for (const DTypeInfo& info : kSupported) {
    if (descr == info.descr) {
      result.dtype = descr;
      result.item_bytes = info.bytes;
    }
  }
  if (result.item_bytes == 0)
    return fail(error, path, "dtype '" + descr + "' unsupported (supported: <u2 <f4 <f8 <i4 <i8 |u1)");
  if (!parse_shape(shape_text, &result.shape)) return fail(error, path, "cannot parse shape (" + shape_text + ")");

  const std::size_t payload = static_cast<std::size_t>(result.numel()) * result.item_bytes;
  const std::size_t offset = preamble + header_len;
  if (bytes.size() - offset < payload)
    return fail(error, path,
                "truncated data: shape " + result.shape_string() + " needs " + std::to_string(payload) +
                    " bytes, file has " + std::to_string(bytes.size() - offset));
  result.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(offset),
                     bytes.begin() + static_cast<std::ptrdiff_t>(offset + payload));
  *out = std::move(result);
  return true;
}

bool load_npy_checked(const std::string& path, const std::string& expected_dtype,
                      const std::vector<int64_t>& expected_shape, NpyArray* out, std::string* error) {
  if (!load_npy(path, out, error)) return false;
  if (out->dtype != expected_dtype)
    return fail(error, path, "dtype '" + out->dtype + "', expected '" + expected_dtype + "'");
  if (!expected_shape.empty() && out->shape != expected_shape) {
    NpyArray want;
    want.shape = expected_shape;
    return fail(error, path, "shape " + out->shape_string() + ", expected " + want.shape_string());
  }
  return true;
}

}  // namespace mlakit::test
