// Reading golden manifests (golden.h).

#include "common/golden.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace mlakit::test {

std::vector<std::string> manifest_cases(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  const std::string json = text.str();
  std::vector<std::string> cases;
  const std::string name_tag = "\"name\":";
  for (size_t at = json.find(name_tag); at != std::string::npos;) {
    const size_t next = json.find(name_tag, at + 1);
    cases.push_back(json.substr(at, next == std::string::npos ? std::string::npos : next - at));
    at = next;
  }
  return cases;
}

std::string field_text(const std::string& object, const std::string& key) {
  const std::string tag = "\"" + key + "\":";
  const size_t at = object.find(tag);
  if (at == std::string::npos) return {};
  const size_t begin = object.find_first_not_of(" \n\t", at + tag.size());
  return begin == std::string::npos ? std::string() : object.substr(begin, 64);
}

std::string string_field(const std::string& object, const std::string& key) {
  const std::string t = field_text(object, key);
  if (t.empty() || t[0] != '"') return {};
  return t.substr(1, t.find('"', 1) - 1);
}

double number_field(const std::string& object, const std::string& key, double fallback) {
  const std::string t = field_text(object, key);
  if (t.empty() || (t[0] != '-' && (t[0] < '0' || t[0] > '9'))) return fallback;
  return std::strtod(t.c_str(), nullptr);
}

std::string object_field(const std::string& object, const std::string& key) {
  const std::string tag = "\"" + key + "\":";
  const size_t at = object.find(tag);
  if (at == std::string::npos) return {};
  const size_t open = object.find_first_not_of(" \n\t", at + tag.size());
  if (open == std::string::npos || object[open] != '{') return {};
  int depth = 0;
  for (size_t i = open; i < object.size(); ++i) {
    depth += object[i] == '{' ? 1 : object[i] == '}' ? -1 : 0;
    if (depth == 0) return object.substr(open, i - open + 1);
  }
  return {};
}

std::vector<float> native_lse(const NpyArray& lse) {
  const int64_t b = lse.shape[0], h_q = lse.shape[1], s_q = lse.shape[2];
  std::vector<float> v(static_cast<size_t>(b * s_q * h_q));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t i = 0; i < s_q; ++i) {
      for (int64_t h = 0; h < h_q; ++h) {
        const float x = lse.at<float>((bi * h_q + h) * s_q + i);
        v[size_t((bi * s_q + i) * h_q + h)] = std::isinf(x) && x > 0 ? -INFINITY : x;
      }
    }
  }
  return v;
}

}  // namespace mlakit::test
