#include "args.h"

#include <cerrno>
#include <cstdlib>

namespace mlakit::cli {

Status Args::parse(int argc, char** argv, int first, const std::set<std::string>& options,
                   const std::set<std::string>& flags, Args* out) {
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    std::string value;
    bool has_inline_value = false;
    if (const size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_inline_value = true;
    }
    if (arg.rfind("--", 0) != 0) return Status::invalid("argument=" + arg + ": must be an option starting with --");
    const std::string name = arg.substr(2);
    if (flags.count(name)) {
      out->flags_.insert(name);
    } else if (options.count(name)) {
      if (!has_inline_value) {
        if (i + 1 >= argc) return Status::invalid("--" + name + "=missing: needs a value");
        value = argv[++i];
      }
      out->values_[name] = value;
    } else {
      return Status::invalid("option=--" + name + ": unknown (see --help)");
    }
  }
  return {};
}

std::string Args::get(const std::string& name, const std::string& fallback) const {
  auto it = values_.find(name);
  return it == values_.end() ? fallback : it->second;
}

Status Args::get_int(const std::string& name, int64_t fallback, int64_t* out) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    *out = fallback;
    return {};
  }
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (errno != 0 || end == it->second.c_str() || *end != '\0') {
    return Status::invalid("--" + name + "=" + it->second + ": must be an integer");
  }
  *out = v;
  return {};
}

}  // namespace mlakit::cli
