#pragma once
// The one documented refusal of the Hopper path that the GPU tests accept (docs/backends.md): it leaves fp8 caches
// with at most 16 query rows per request to the portable path, which is faster there, and says so. Every other
// refusal fails a test. Shared by the decode, sparse, V4/extra and fuzz tests so that they agree on the rule.

#include <gtest/gtest.h>

#include <string>

#include "mlakit/registry.h"
#include "mlakit/status.h"

namespace mlakit::test {

/// Whether `s` is the Hopper path's fp8 row rule (and nothing else).
inline bool is_fp8_row_refusal(const Status& s) {
  return s.code() == StatusCode::kNotSupported && s.message().find("query rows per request") != std::string::npos;
}

/// Checks a selection on an sm_90 device: the portable `cuda` with the Hopper path's fp8 row rule named among those
/// passed over when `fp8_rule_applies`, else `cuda_sm90`. `what` names the case in failure messages.
inline void expect_hopper_selection(const Selection& sel, bool fp8_rule_applies, const std::string& what) {
  ASSERT_NE(sel.backend, nullptr) << what << ": " << sel.explain();
  if (!fp8_rule_applies) {
    EXPECT_EQ(sel.backend->name(), "cuda_sm90") << what << ": " << sel.explain();
    return;
  }
  EXPECT_EQ(sel.backend->name(), "cuda") << what << ": " << sel.explain();
  bool named = false;
  for (const Rejection& r : sel.passed_over) {
    named = named || (r.backend == "cuda_sm90" && r.reason.find("query rows per request") != std::string::npos);
  }
  EXPECT_TRUE(named) << what << ": " << sel.explain();
}

}  // namespace mlakit::test
