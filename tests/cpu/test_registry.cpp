// Backend registry and selection (docs/spec.md section 9): automatic selection picks the highest-priority
// backend that supports the call and says why every other one was passed over; a named backend is used
// or refused with its reason, never replaced; the public entry points validate before any backend runs.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/decode_case.h"
#include "common/picky_backend.h"
#include "mlakit/registry.h"

namespace mlakit {
namespace {


using test::PickyBackend;

test::DecodeCase make_case(int64_t page_size) {
  test::DecodeCaseConfig cfg;
  cfg.page_size = page_size;
  cfg.seq_lens = {3, 20};
  cfg.h_q = 2;
  return test::DecodeCase::generate(cfg);
}

Registry registry_with_picky(PickyBackend::Counts* n) {
  Registry r = make_default_registry();
  EXPECT_TRUE(r.add(std::make_unique<PickyBackend>("picky", n)).ok());
  return r;
}

TEST(Registry, DefaultHasReferenceFirstAmongCpuBackends) {
  const Registry r = make_default_registry();
  ASSERT_NE(r.get("reference"), nullptr);
  EXPECT_EQ(r.get("reference")->device_type(), DeviceType::kCPU);
  EXPECT_EQ(r.get("no-such-backend"), nullptr);
  const auto all = r.list();
  for (size_t i = 1; i < all.size(); ++i) EXPECT_GE(all[i - 1]->priority(), all[i]->priority());
}

TEST(Registry, DuplicateNameRejected) {
  PickyBackend::Counts n;
  Registry r = registry_with_picky(&n);
  const Status s = r.add(std::make_unique<PickyBackend>("picky", &n));
  EXPECT_EQ(s.message(), "backend.name=picky: must be unique in the registry");
}

TEST(Registry, AutomaticPrefersHigherPriorityWhenSupported) {
  PickyBackend::Counts n;
  const Registry r = registry_with_picky(&n);
  test::DecodeCase c = make_case(16);
  const Selection sel = r.select(c.problem());
  ASSERT_NE(sel.backend, nullptr) << sel.explain();
  EXPECT_EQ(sel.backend->name(), "picky");
  bool saw_reference = false;
  for (const Rejection& rej : sel.passed_over) {
    if (rej.backend == "reference") {
      saw_reference = true;
      EXPECT_EQ(rej.reason, "lower priority than 'picky'");
    }
  }
  EXPECT_TRUE(saw_reference) << sel.explain();
}

TEST(Registry, AutomaticFallsBackAndSaysWhy) {
  PickyBackend::Counts n;
  const Registry r = registry_with_picky(&n);
  test::DecodeCase c = make_case(64);
  const Selection sel = r.select(c.problem());
  ASSERT_NE(sel.backend, nullptr);
  EXPECT_EQ(sel.backend->name(), "reference");
  bool saw_picky = false;
  for (const Rejection& rej : sel.passed_over) {
    if (rej.backend == "picky") {
      saw_picky = true;
      EXPECT_EQ(rej.reason, "page_size=64: picky takes only 16");
    }
  }
  EXPECT_TRUE(saw_picky) << sel.explain();
  EXPECT_NE(sel.explain().find("passed over: picky: page_size=64: picky takes only 16"), std::string::npos);
}

TEST(Registry, NamedBackendIsNeverRerouted) {
  PickyBackend::Counts n;
  const Registry r = registry_with_picky(&n);
  test::DecodeCase c = make_case(64);
  const Selection sel = r.select(c.problem(), Preference{"picky"});
  EXPECT_EQ(sel.backend, nullptr);
  EXPECT_EQ(sel.status.code(), StatusCode::kNotSupported);
  EXPECT_EQ(sel.status.message(), "page_size=64: picky takes only 16");
}

TEST(Registry, UnknownNameListsKnownBackends) {
  const Registry r = make_default_registry();
  test::DecodeCase c = make_case(64);
  const Selection sel = r.select(c.problem(), Preference{"flash"});
  EXPECT_EQ(sel.backend, nullptr);
  EXPECT_EQ(sel.status.message().rfind("backend=flash: must be one of ", 0), 0u) << sel.status.message();
  EXPECT_NE(sel.status.message().find("reference"), std::string::npos);
}

TEST(Registry, InvalidProblemReachesNoBackend) {
  PickyBackend::Counts n;
  const Registry r = registry_with_picky(&n);
  test::DecodeCase c = make_case(16);
  DecodeProblem p = c.problem();
  p.softmax_scale = -1.0f;
  const Selection sel = r.select(p);
  EXPECT_EQ(sel.backend, nullptr);
  EXPECT_TRUE(sel.passed_over.empty());
  EXPECT_EQ(sel.status.code(), StatusCode::kInvalidArgument);
  // The public run() validates too: a backend's hook is never reached with a bad call.
  EXPECT_FALSE(r.get("picky")->run(p, Workspace{}, nullptr).ok());
  EXPECT_EQ(n.runs, 0);
}

TEST(Registry, WorkspaceTooSmallIsRefused) {
  PickyBackend::Counts n;
  const Registry r = registry_with_picky(&n);
  test::DecodeCase c = make_case(16);
  const Backend* b = r.get("picky");
  ASSERT_EQ(b->workspace_bytes(c.problem()), 64u);
  char ws[64];
  const Status s = b->run(c.problem(), Workspace{ws, 32}, nullptr);
  EXPECT_EQ(s.message(), "workspace.bytes=32: must be >= workspace_bytes(problem)=64");
  EXPECT_EQ(n.runs, 0);
  EXPECT_TRUE(b->run(c.problem(), Workspace{ws, sizeof ws}, nullptr).ok());
  EXPECT_EQ(n.runs, 1);
}

TEST(Registry, WrongDeviceIsExplained) {
  const Registry r = make_default_registry();
  test::DecodeCase c = make_case(64);
  test::DecodeBuffers at = c.host_buffers();
  const DecodeProblem p = c.problem(at, Device::cuda(0));  // pointers never read: validation is host-only
  const Selection sel = r.select(p);
  for (const Rejection& rej : sel.passed_over) {
    if (rej.backend == "reference") {
      EXPECT_EQ(rej.reason, "backend 'reference' takes cpu tensors, the call's are on cuda:0");
    }
  }
}

// A caller who names the Hopper backend where it cannot run gets its reason, never another backend.
TEST(Registry, NamedHopperBackendIsNeverRerouted) {
  const Registry r = make_default_registry();
  const Backend* hopper = r.get("cuda_sm90");
  if (hopper == nullptr) GTEST_SKIP() << "built without CUDA: no cuda_sm90 backend";
  if (hopper->available().ok()) GTEST_SKIP() << "this machine has a Hopper GPU (tests/gpu covers it)";
  test::DecodeCase c = make_case(64);
  test::DecodeBuffers at = c.host_buffers();
  const DecodeProblem p = c.problem(at, Device::cuda(0));
  const Selection sel = r.select(p, Preference{"cuda_sm90"});
  EXPECT_EQ(sel.backend, nullptr);
  EXPECT_EQ(sel.status.message().rfind("backend 'cuda_sm90' is not available: ", 0), 0u) << sel.status.to_string();
}

/// A CUDA-typed test double that runs on GPU 0 only (as on a machine whose GPUs differ): available() (the current
/// device) is fine, available_on() refuses any other ordinal; it counts the calls its decode hook gets.
class DeviceZeroOnly final : public Backend {
 public:
  explicit DeviceZeroOnly(int* hooks) : hooks_(hooks) {}
  std::string name() const override { return "device-zero"; }
  std::string description() const override { return "test double: runs on cuda:0 only"; }
  DeviceType device_type() const override { return DeviceType::kCUDA; }
  int priority() const override { return 50; }
  std::vector<Feature> features() const override { return {{OpKind::kDecode, "cuda:0 only"}}; }
  Status available() const override { return {}; }
  Status available_on(Device device) const override {
    if (device.index == 0) return {};
    return Status::not_supported("cuda:" + std::to_string(device.index) + " is not this backend's kind of GPU");
  }

 protected:
  Status do_supports_decode(const DecodeProblem&) const override {
    ++*hooks_;
    return {};
  }

 private:
  int* hooks_;
};

// Every entry point judges availability by the device of the call's tensors, not by the current one: a call on cuda:1
// is refused with that device's reason before the backend's own checks, by supports(), plan() and selection alike.
TEST(Registry, AvailabilityIsAskedForTheCallsDevice) {
  int hooks = 0;
  Registry r;
  ASSERT_TRUE(r.add(std::make_unique<DeviceZeroOnly>(&hooks)).ok());
  const Backend& be = *r.get("device-zero");
  test::DecodeCase c = make_case(16);
  const test::DecodeBuffers at = c.host_buffers();
  EXPECT_TRUE(be.supports(c.problem(at, Device::cuda(0))).ok());
  EXPECT_EQ(hooks, 1);
  const DecodeProblem on_one = c.problem(at, Device::cuda(1));
  const std::string why = "backend 'device-zero' is not available: cuda:1 is not this backend's kind of GPU";
  EXPECT_EQ(be.supports(on_one).message(), why);
  EXPECT_EQ(be.plan(on_one, Workspace{}, Stream{}).message(), why);
  const Selection sel = r.select(on_one);
  EXPECT_EQ(sel.backend, nullptr);
  ASSERT_EQ(sel.passed_over.size(), 1u) << sel.explain();
  EXPECT_EQ(sel.passed_over[0].reason, why);
  EXPECT_EQ(hooks, 1);  // never asked about a call on a device it cannot run on
}

TEST(Registry, UnimplementedOperationSaysSo) {
  PickyBackend::Counts n;
  const Registry r = registry_with_picky(&n);
  float parts[2] = {1, 2}, lses[2] = {0, 0}, out[1], lse[1];
  MergeProblem m;
  m.parts_out = TensorView::contiguous(parts, DType::kFP32, {2, 1, 1});
  m.parts_lse = TensorView::contiguous(lses, DType::kFP32, {2, 1});
  m.out = TensorView::contiguous(out, DType::kFP32, {1, 1});
  m.lse = TensorView::contiguous(lse, DType::kFP32, {1});
  EXPECT_EQ(r.get("picky")->supports(m).message(), "backend 'picky' does not implement merge");
}

}  // namespace
}  // namespace mlakit
