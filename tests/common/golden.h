#pragma once
// Reading the golden datasets of tests/data (FlashMLA's outputs): the cases of a manifest.json and FlashMLA's LSE
// convention. Shared by the tests of the flashmla and flashmla_sparse datasets.

#include <string>
#include <vector>

#include "common/npy.h"

namespace mlakit::test {

/// The text of each case object of a manifest.json (one object per case, each starting with "name"); not a
/// general JSON parser. Empty when the file does not exist.
std::vector<std::string> manifest_cases(const std::string& path);

/// The text after `"key":` in `object` (up to 64 characters), or "" when absent. A nested object's keys are found
/// too: look the nested object up first (object_field) to scope a search.
std::string field_text(const std::string& object, const std::string& key);
/// A string value ("" when absent), a number (`fallback` when absent).
std::string string_field(const std::string& object, const std::string& key);
double number_field(const std::string& object, const std::string& key, double fallback);
/// The text of a nested object `"key": { ... }`, or "" when the value is not an object (e.g. null).
std::string object_field(const std::string& object, const std::string& key);

/// FlashMLA's lse [b, h_q, s_q] with +inf for empty rows -> MLAKit's [b, s_q, h_q] with -inf.
std::vector<float> native_lse(const NpyArray& lse);

}  // namespace mlakit::test
