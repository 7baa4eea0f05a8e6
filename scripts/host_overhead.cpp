// The library's own host cost of one one-shot decode, with kernels that do nothing (a no-op backend on "cuda" tensors
// that are never read): Registry::select + workspace_bytes + plan + run (the bindings' path before prepared calls)
// against Registry::prepare + plan + run (include/mlakit/prepared.h). Build and run from the repository root after a
// CPU build in build/ (scripts/build.sh):
//   g++ -std=c++20 -O2 -Iinclude scripts/host_overhead.cpp -Wl,--start-group build/src/libmlakit.a
//       build/src/libmlakit_core.a -Wl,--end-group -lpthread -o /tmp/host_overhead && /tmp/host_overhead

#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>
#include "mlakit/mlakit.h"
using namespace mlakit;
class NoopCuda final : public Backend {
 public:
  std::string name() const override { return "noop"; }
  std::string description() const override { return "no-op"; }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  int priority() const override { return 100; }
  std::vector<Feature> features() const override { return {}; }
 protected:
  Status do_supports_decode(const DecodeProblem& p) const override {
    if (p.kv.page_size() > 128) return Status::not_supported("P");
    return {};
  }
  size_t do_workspace_bytes_decode(const DecodeProblem&) const override { return 64; }
  Status do_plan_decode(const DecodeProblem&, Workspace, Stream) const override { return {}; }
  Status do_run_decode(const DecodeProblem&, Workspace, Stream) const override { return {}; }
};
int main() {
  const int64_t b = 128, h = 128, L = 4096, P = 64, pages = 64;
  std::vector<uint16_t> q(b * h * 576), out(b * h * 512);
  std::vector<uint8_t> kv(size_t(pages) * P * 1152);
  std::vector<int32_t> lens(b, int32_t(L)), table(b * (L / P));
  std::vector<float> lse(b * h);
  const Device d = Device::cuda(0);
  DecodeProblem p;
  p.q = TensorView::contiguous(q.data(), DType::kBF16, {b, 1, h, 576}, d);
  p.kv = KvCacheView::contiguous(kv.data(), KvFormat::kBF16, pages, P, MlaDims{});
  p.kv.pages.device = d;
  p.block_table = TensorView::contiguous(table.data(), DType::kInt32, {b, L / P}, d);
  p.seq_lens = TensorView::contiguous(lens.data(), DType::kInt32, {b}, d);
  p.out = TensorView::contiguous(out.data(), DType::kBF16, {b, 1, h, 512}, d);
  p.lse = TensorView::contiguous(lse.data(), DType::kFP32, {b, 1, h}, d);
  p.softmax_scale = 0.07f;
  Registry r = make_default_registry();
  if (!r.add(std::make_unique<NoopCuda>()).ok()) return 1;
  uint8_t ws[64];
  const int n = 200000;
  for (int round = 0; round < 3; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    int ok = 0;
    for (int i = 0; i < n; ++i) {
      const Selection sel = r.select(p);
      const Backend& be = *sel.backend;
      const size_t bytes = be.workspace_bytes(p);
      ok += be.plan(p, Workspace{ws, bytes}, nullptr).ok() && be.run(p, Workspace{ws, bytes}, nullptr).ok();
    }
    auto t1 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      Prepared<DecodeProblem> c;
      ok += r.prepare(p, {}, &c).ok() && c.plan(Workspace{ws, c.workspace_bytes()}, nullptr).ok() &&
            c.run(Workspace{ws, c.workspace_bytes()}, nullptr).ok();
    }
    auto t2 = std::chrono::steady_clock::now();
    std::printf("round %d: select+workspace_bytes+plan+run %.2f us, prepare+plan+run %.2f us (%d ok)\n", round,
                std::chrono::duration<double, std::micro>(t1 - t0).count() / n,
                std::chrono::duration<double, std::micro>(t2 - t1).count() / n, ok);
  }
}
