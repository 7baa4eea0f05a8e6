// PLACEHOLDER until the cache kernels land (issue 4): every call says so.
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace {
Status missing() { return Status::not_supported("cuda cache operations: not implemented yet"); }
}  // namespace
std::vector<Feature> cache_features() { return {}; }
Status append_kv_supports(const AppendKvProblem&) { return missing(); }
Status append_kv_run(const AppendKvProblem&, Stream) { return missing(); }
Status rope_supports(const RopeProblem&) { return missing(); }
Status rope_run(const RopeProblem&, Stream) { return missing(); }
Status gather_kv_supports(const GatherKvProblem&) { return missing(); }
Status gather_kv_run(const GatherKvProblem&, Stream) { return missing(); }
Status merge_supports(const MergeProblem&) { return missing(); }
Status merge_run(const MergeProblem&, Stream) { return missing(); }
Status merge_pair_supports(const MergePairProblem&) { return missing(); }
Status merge_pair_run(const MergePairProblem&, Stream) { return missing(); }
}  // namespace mlakit::cuda
