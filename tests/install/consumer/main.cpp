// Runs one merge on the CPU through the installed library and checks the answer (exit code 0 = right).
#include <cmath>
#include <cstdio>

#include <mlakit/mlakit.h>

int main() {
  mlakit::Registry registry = mlakit::make_default_registry();
  const mlakit::Backend* ref = registry.get("reference");
  if (ref == nullptr) return 1;
  // Two parts with equal LSE merge to their mean, and LSE grows by ln 2.
  float parts[2][2] = {{1.0f, 2.0f}, {3.0f, 4.0f}};
  float lses[2] = {0.5f, 0.5f};
  float out[2] = {0, 0}, lse = 0;
  mlakit::MergeProblem p;
  p.parts_out = mlakit::TensorView::contiguous(parts, mlakit::DType::kFP32, {2, 1, 2});
  p.parts_lse = mlakit::TensorView::contiguous(lses, mlakit::DType::kFP32, {2, 1});
  p.out = mlakit::TensorView::contiguous(out, mlakit::DType::kFP32, {1, 2});
  p.lse = mlakit::TensorView::contiguous(&lse, mlakit::DType::kFP32, {1});
  mlakit::Status s = ref->run(p, nullptr);
  if (!s.ok()) {
    std::printf("%s\n", s.to_string().c_str());
    return 1;
  }
  const bool right = std::fabs(out[0] - 2.0f) < 1e-6f && std::fabs(out[1] - 3.0f) < 1e-6f &&
                     std::fabs(lse - (0.5f + std::log(2.0f))) < 1e-6f;
  std::printf("mlakit %s consumer: %s\n", mlakit::version(), right ? "ok" : "wrong result");
  return right ? 0 : 1;
}
