#pragma once
/// @file status.h
/// Error reporting for every MLAKit entry point. Nothing in the library throws or aborts on bad input:
/// every check returns a Status whose message names the field, the value and the rule.

#include <string>
#include <string_view>
#include <utility>

namespace mlakit {

/// What kind of failure a Status carries.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  ///< the call itself is wrong (shape, dtype, null pointer, bad value)
  kNotSupported,     ///< the call is valid but this backend does not implement it
  kCudaError,        ///< a CUDA API call or kernel launch failed
  kInternal,         ///< a bug in MLAKit
};

/// Name of a status code, e.g. "invalid_argument".
const char* status_code_name(StatusCode code);

/// Result of an operation: a code and, on failure, a message naming field, value and rule.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return {}; }
  static Status invalid(std::string message) { return {StatusCode::kInvalidArgument, std::move(message)}; }
  static Status not_supported(std::string message) { return {StatusCode::kNotSupported, std::move(message)}; }
  static Status cuda_error(std::string message) { return {StatusCode::kCudaError, std::move(message)}; }
  static Status internal(std::string message) { return {StatusCode::kInternal, std::move(message)}; }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "invalid_argument: page_size=48: must be a power of two in [1, 256]" (or "ok").
  std::string to_string() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace mlakit

/// Return early from the enclosing function when `expr` yields a failed Status.
#define MLAKIT_TRY(expr)                               \
  do {                                                 \
    ::mlakit::Status mlakit_try_status_ = (expr);      \
    if (!mlakit_try_status_.ok()) return mlakit_try_status_; \
  } while (0)
