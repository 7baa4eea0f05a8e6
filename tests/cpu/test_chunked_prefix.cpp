// Chunked prefix on the reference (common/chunked_prefix.h): four chunks of ragged prefixes, one request with no
// new token.

#include <gtest/gtest.h>

#include "common/chunked_prefix.h"
#include "mlakit/registry.h"

namespace mlakit {
namespace {

TEST(ChunkedPrefix, FourPrefixChunksPlusCausalNewTokensMergeToTheUnchunkedPrefill) {
  const Registry registry = make_default_registry();
  const Backend* reference = registry.get("reference");
  const test::Runner run{[&](const PrefillProblem& p) { return reference->run(p, nullptr); },
                         [&](const MergeProblem& m) { return reference->run(m, nullptr); }};
  test::expect_chunked_prefix_matches_unchunked({{1024, 48}, {704, 17}, {3, 0}}, 4, 5, run);
}

}  // namespace
}  // namespace mlakit
