#pragma once
// The CPU reference: one function per operation of docs/spec.md sections 1-8, each in its own file.
// They are called only with problems that passed validate(); they accept any geometry (d_c, d_r, P).
// Plain loops, float32 accumulation (float64 where cheap), parallel over independent rows.

#include "mlakit/problems.h"

namespace mlakit::reference {

Status decode(const DecodeProblem& p);               // decode.cpp
Status sparse_decode(const SparseDecodeProblem& p);  // sparse_decode.cpp
Status prefill(const PrefillProblem& p);             // prefill.cpp
Status merge(const MergeProblem& p);                 // merge.cpp
Status merge_pair(const MergePairProblem& p);        // merge.cpp
Status append_kv(const AppendKvProblem& p);          // append_kv.cpp
Status rope(const RopeProblem& p);                   // rope.cpp
Status gather_kv(const GatherKvProblem& p);          // gather_kv.cpp

}  // namespace mlakit::reference
