#pragma once
// Host entry points of the CUDA backends, one group per operation folder. cuda_backend.cpp (portable) and
// sm90_backend.cpp (Hopper) dispatch to these; they receive only problems that passed validate() and live
// on a CUDA device.

#include <cstddef>
#include <vector>

#include "mlakit/backend.h"
#include "mlakit/problems.h"

namespace mlakit::cuda {

// decode/sm80: the portable dense decode (issue 3)
std::vector<Feature> decode_features();
Status decode_supports(const DecodeProblem& p);
size_t decode_workspace_bytes(const DecodeProblem& p);
Status decode_plan(const DecodeProblem& p, Workspace ws, Stream stream);
Status decode_run(const DecodeProblem& p, Workspace ws, Stream stream);

// decode/sm80: the portable sparse decode (issue 9); run includes the device-side plan
std::vector<Feature> sparse_decode_features();
Status sparse_decode_supports(const SparseDecodeProblem& p);
size_t sparse_decode_workspace_bytes(const SparseDecodeProblem& p);
Status sparse_decode_run(const SparseDecodeProblem& p, Workspace ws, Stream stream);

// decode/sm90: the Hopper dense decode (issue 8)
std::vector<Feature> decode_sm90_features();
Status decode_sm90_available(int ordinal);
Status decode_sm90_supports(const DecodeProblem& p);
size_t decode_sm90_workspace_bytes(const DecodeProblem& p);
Status decode_sm90_plan(const DecodeProblem& p, Workspace ws, Stream stream);
Status decode_sm90_run(const DecodeProblem& p, Workspace ws, Stream stream);

// decode/sm90: the Hopper sparse decode (issue 9); run includes the device-side plan
std::vector<Feature> sparse_decode_sm90_features();
Status sparse_decode_sm90_supports(const SparseDecodeProblem& p);
size_t sparse_decode_sm90_workspace_bytes(const SparseDecodeProblem& p);
Status sparse_decode_sm90_run(const SparseDecodeProblem& p, Workspace ws, Stream stream);

// prefill/sm80: the portable ragged prefill (issue 10)
std::vector<Feature> prefill_features();
Status prefill_supports(const PrefillProblem& p);
Status prefill_run(const PrefillProblem& p, Stream stream);

// prefill/sm90: the Hopper ragged prefill (issue 10)
std::vector<Feature> prefill_sm90_features();
Status prefill_sm90_supports(const PrefillProblem& p);
Status prefill_sm90_run(const PrefillProblem& p, Stream stream);

// cache/ (issue 4)
std::vector<Feature> cache_features();
Status append_kv_supports(const AppendKvProblem& p);
Status append_kv_run(const AppendKvProblem& p, Stream stream);
Status rope_supports(const RopeProblem& p);
Status rope_run(const RopeProblem& p, Stream stream);
Status gather_kv_supports(const GatherKvProblem& p);
Status gather_kv_run(const GatherKvProblem& p, Stream stream);
Status merge_supports(const MergeProblem& p);
Status merge_run(const MergeProblem& p, Stream stream);
Status merge_pair_supports(const MergePairProblem& p);
Status merge_pair_run(const MergePairProblem& p, Stream stream);

}  // namespace mlakit::cuda
