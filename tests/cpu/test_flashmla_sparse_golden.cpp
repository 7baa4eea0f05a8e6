// The CPU reference, through the public backend API, reproduces every case of FlashMLA's sparse golden vectors
// for DeepSeek V4 and V3.2 (MLAKIT_TESTDATA_DIR "/flashmla_sparse", see its README.md): the paged fp8_ds_v4
// format with V as the whole row, the extra cache with its own page size and topk_length, attention sinks (+inf
// and -inf heads), all-invalid rows, and fp8_ds_mla caches with odd page sizes and padded page strides. out is
// compared with docs/spec.md section 10's bf16 tolerance, lse with the LSE tolerance after converting FlashMLA's
// conventions (golden.h). Also: append_kv in fp8_ds_v4 reproduces FlashMLA's cache bytes from the bf16 rows. The
// checks live in common/sparse_golden.cpp; tests/gpu/test_sparse_golden.cpp runs them on the CUDA paths.

#include <gtest/gtest.h>

#include "common/sparse_golden.h"
#include "mlakit/registry.h"

namespace mlakit::test {
namespace {

const Backend& reference_backend() {
  static const Registry registry = make_default_registry();
  return *registry.get("reference");
}

class FlashMlaSparseGolden : public ::testing::TestWithParam<SparseGoldenCase> {};

TEST_P(FlashMlaSparseGolden, ReferenceReproducesFlashMla) {
  const auto mem = host_memory();
  check_sparse_golden_decode(GetParam(), reference_backend(), *mem, /*skip_refusal=*/false);
}

// FlashMLA's V4 cache bytes are the writer of docs/spec.md section 4 applied to kv_bf16: append_kv must give them
// exactly, page padding included (zero in both). Run on the cases that store kv_bf16.
class FlashMlaSparseGoldenBytes : public ::testing::TestWithParam<SparseGoldenCase> {};

TEST_P(FlashMlaSparseGoldenBytes, AppendKvWritesFlashMlasV4Bytes) {
  const auto mem = host_memory();
  check_sparse_golden_append(GetParam(), reference_backend(), *mem);
}

INSTANTIATE_TEST_SUITE_P(Manifest, FlashMlaSparseGolden, ::testing::ValuesIn(sparse_golden_cases()),
                         [](const ::testing::TestParamInfo<SparseGoldenCase>& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Manifest, FlashMlaSparseGoldenBytes, ::testing::ValuesIn(sparse_golden_cases_with_kv_bf16()),
                         [](const ::testing::TestParamInfo<SparseGoldenCase>& info) { return info.param.name; });

}  // namespace
}  // namespace mlakit::test
