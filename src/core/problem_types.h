#pragma once
// Every problem type of mlakit/problems.h, for the explicit instantiations of the templates over them (selection,
// prepared calls): one list, so that a new operation is added in one place.

#define MLAKIT_PROBLEM_TYPES(X)                                                                                    \
  X(DecodeProblem)                                                                                                 \
  X(SparseDecodeProblem) X(PrefillProblem) X(MergeProblem) X(MergePairProblem) X(AppendKvProblem) X(RopeProblem)   \
  X(GatherKvProblem)
