#pragma once
// A small command-line parser: "--name value" options and "--flag" switches, with every unknown or
// malformed argument reported by name (the CLI follows the library's field=value: rule messages).

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "mlakit/status.h"

namespace mlakit::cli {

class Args {
 public:
  /// Parses argv[first..argc). `options` take a value, `flags` do not.
  static Status parse(int argc, char** argv, int first, const std::set<std::string>& options,
                      const std::set<std::string>& flags, Args* out);

  bool has(const std::string& name) const { return values_.count(name) > 0 || flags_.count(name) > 0; }
  std::string get(const std::string& name, const std::string& fallback) const;
  /// Integer option; fails with "--name=value: must be an integer" when malformed.
  Status get_int(const std::string& name, int64_t fallback, int64_t* out) const;

 private:
  std::map<std::string, std::string> values_;
  std::set<std::string> flags_;
};

}  // namespace mlakit::cli
