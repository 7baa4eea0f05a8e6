#include "common/shard_merge.h"

#include <gtest/gtest.h>

namespace mlakit::test {

::testing::AssertionResult merge_partials(const Backend& merge, const ShardPartials& parts, int world,
                                          DecodeCase& into) {
  const int64_t d_v = into.config.dims.d_v();
  const DType dt = into.config.q_dtype;
  MergeProblem m;
  m.parts_out = TensorView::contiguous(parts.out.data(), dt, {world, parts.rows, d_v});
  m.parts_lse = TensorView::contiguous(parts.lse.data(), DType::kFP32, {world, parts.rows});
  m.out = TensorView::contiguous(into.out.data(), dt, {parts.rows, d_v});
  if (!into.lse.empty()) m.lse = TensorView::contiguous(into.lse.data(), DType::kFP32, {parts.rows});
  const Status st = merge.run(m, nullptr);
  if (!st.ok()) return ::testing::AssertionFailure() << "merge: " << st.to_string();
  return ::testing::AssertionSuccess();
}

}  // namespace mlakit::test
