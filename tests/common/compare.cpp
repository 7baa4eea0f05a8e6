#include "common/compare.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "mlakit/numeric.h"

namespace mlakit::test {
namespace {

constexpr int kPrintDigits = 9;  // enough to tell float32 values apart

/// Collects failures: the first one in full, and a count of all of them.
class FailureLog {
 public:
  explicit FailureLog(std::string_view what) : what_(what) {}

  void add(int64_t index, int64_t row_len, double got, double expected, const std::string& detail) {
    if (count_++ > 0) return;
    std::ostringstream s;
    s.precision(kPrintDigits);
    s << "first at index " << index;
    if (row_len > 0) s << " (row " << index / row_len << ", col " << index % row_len << ")";
    s << ": got " << got << ", expected " << expected << " (" << detail << ")";
    first_ = s.str();
  }

  ::testing::AssertionResult result(int64_t total, const std::string& rule) const {
    if (count_ == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what_ << ": " << count_ << " of " << total
                                         << " elements fail (" << rule << "); " << first_;
  }

 private:
  std::string what_;
  int64_t count_ = 0;
  std::string first_;
};

std::string size_mismatch(std::string_view what, size_t got, size_t expected) {
  std::ostringstream s;
  s << what << ": " << got << " elements, reference has " << expected;
  return s.str();
}

}  // namespace

OutTolerance out_tolerance(DType out_dtype) {
  switch (out_dtype) {
    case DType::kBF16: return {std::ldexp(1.0, -8), std::ldexp(1.0, -6)};
    case DType::kFP16: return {std::ldexp(1.0, -10), std::ldexp(1.0, -9)};
    default: return {std::ldexp(1.0, -20), std::ldexp(1.0, -20)};
  }
}

OutTolerance reference_rounding_tolerance(DType out_dtype) {
  constexpr double kVmaxCoef = 0x1p-20;
  switch (out_dtype) {
    case DType::kBF16: return {kVmaxCoef, 0x1p-8};
    case DType::kFP16: return {kVmaxCoef, 0x1p-11};
    default: return {kVmaxCoef, 0x1p-22};
  }
}

::testing::AssertionResult check_out(std::span<const float> out, std::span<const float> ref,
                                     std::span<const float> row_vmax, int64_t row_len, DType out_dtype,
                                     std::string_view what) {
  return check_out(out, ref, row_vmax, row_len, out_tolerance(out_dtype), what);
}

::testing::AssertionResult check_out(std::span<const float> out, std::span<const float> ref,
                                     std::span<const float> row_vmax, int64_t row_len, OutTolerance tol,
                                     std::string_view what) {
  if (out.size() != ref.size()) return ::testing::AssertionFailure() << size_mismatch(what, out.size(), ref.size());
  const size_t rows = row_len > 0 ? ref.size() / size_t(row_len) : 0;
  if (row_len <= 0 || rows * size_t(row_len) != ref.size() || (row_vmax.size() != 1 && row_vmax.size() != rows)) {
    return ::testing::AssertionFailure() << what << ": bad comparison setup (row_len " << row_len << ", "
                                         << row_vmax.size() << " vmax values for " << rows << " rows)";
  }
  FailureLog log(what);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double got = out[i], expected = ref[i];
    const double vmax = row_vmax.size() == 1 ? row_vmax[0] : row_vmax[i / size_t(row_len)];
    const double bound = tol.vmax_coef * vmax + tol.ref_coef * std::fabs(expected);
    const double diff = std::fabs(got - expected);
    if (!std::isfinite(expected)) {
      log.add(int64_t(i), row_len, got, expected, "the reference is not finite");
    } else if (!std::isfinite(got)) {
      log.add(int64_t(i), row_len, got, expected, "not finite");
    } else if (!(diff <= bound)) {
      std::ostringstream d;
      d.precision(kPrintDigits);
      d << "|diff|=" << diff << " > tol=" << bound << " with vmax=" << vmax;
      log.add(int64_t(i), row_len, got, expected, d.str());
    }
  }
  std::ostringstream rule;
  rule << "|out - ref| <= " << tol.vmax_coef << " * vmax + " << tol.ref_coef << " * |ref|";
  return log.result(int64_t(ref.size()), rule.str());
}

::testing::AssertionResult check_lse(std::span<const float> lse, std::span<const float> ref, std::string_view what) {
  if (lse.size() != ref.size()) return ::testing::AssertionFailure() << size_mismatch(what, lse.size(), ref.size());
  FailureLog log(what);
  for (size_t i = 0; i < ref.size(); ++i) {
    const double got = lse[i], expected = ref[i];
    if (std::isinf(expected) && expected < 0) {
      if (!(std::isinf(got) && got < 0)) log.add(int64_t(i), 0, got, expected, "an empty row must give -inf exactly");
    } else if (!std::isfinite(expected)) {
      log.add(int64_t(i), 0, got, expected, "the reference is neither finite nor -inf");
    } else if (!std::isfinite(got)) {
      log.add(int64_t(i), 0, got, expected, "not finite");
    } else if (!(std::fabs(got - expected) <= kLseAbs + kLseRel * std::fabs(expected))) {
      std::ostringstream d;
      d.precision(kPrintDigits);
      d << "|diff|=" << std::fabs(got - expected);
      log.add(int64_t(i), 0, got, expected, d.str());
    }
  }
  std::ostringstream rule;
  rule << "|lse - ref| <= " << kLseAbs << " + " << kLseRel << " * |ref|, -inf exact";
  return log.result(int64_t(ref.size()), rule.str());
}

std::vector<float> to_floats(const void* data, DType dtype, int64_t n) {
  std::vector<float> values(static_cast<size_t>(n > 0 ? n : 0));
  const auto* bits = static_cast<const uint16_t*>(data);
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kBF16: values[size_t(i)] = bf16_to_float(bits[i]); break;
      case DType::kFP16: values[size_t(i)] = fp16_to_float(bits[i]); break;
      case DType::kFP32: std::memcpy(&values[size_t(i)], static_cast<const float*>(data) + i, sizeof(float)); break;
      default: values[size_t(i)] = std::nanf(""); break;  // not an output dtype: fails any comparison
    }
  }
  return values;
}

}  // namespace mlakit::test
