// PLACEHOLDER until the decode kernels land (issue 3): every call says so.
#include "cuda/ops.h"

namespace mlakit::cuda {
namespace {
Status missing() { return Status::not_supported("cuda decode: not implemented yet"); }
}  // namespace
std::vector<Feature> decode_features() { return {}; }
Status decode_supports(const DecodeProblem&) { return missing(); }
size_t decode_workspace_bytes(const DecodeProblem&) { return 0; }
Status decode_plan(const DecodeProblem&, Workspace, Stream) { return missing(); }
Status decode_run(const DecodeProblem&, Workspace, Stream) { return missing(); }
}  // namespace mlakit::cuda
