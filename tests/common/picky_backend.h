#pragma once
// A test double for selection and prepared calls: a CPU backend that outranks the reference, serves decode only with
// page size 16 (its refusal names it: "page_size=64: <name> takes only 16"), wants a 64-byte workspace, and counts
// how often it is asked whether it supports a call, planned and run.

#include <string>
#include <utility>
#include <vector>

#include "mlakit/backend.h"

namespace mlakit::test {

class PickyBackend final : public Backend {
 public:
  struct Counts {
    int supports = 0, plans = 0, runs = 0;
  };
  PickyBackend(std::string name, Counts* counts) : name_(std::move(name)), c_(counts) {}
  std::string name() const override { return name_; }
  std::string description() const override { return "test double: page_size 16 only, counts its hooks"; }
  DeviceType device_type() const override { return DeviceType::kCPU; }
  int priority() const override { return 5; }
  std::vector<Feature> features() const override { return {{OpKind::kDecode, "P=16"}}; }

 protected:
  Status do_supports_decode(const DecodeProblem& p) const override {
    ++c_->supports;
    if (p.kv.page_size() != 16) {
      return Status::not_supported("page_size=" + std::to_string(p.kv.page_size()) + ": " + name_ + " takes only 16");
    }
    return {};
  }
  size_t do_workspace_bytes_decode(const DecodeProblem&) const override { return 64; }
  Status do_plan_decode(const DecodeProblem&, Workspace, Stream) const override {
    ++c_->plans;
    return {};
  }
  Status do_run_decode(const DecodeProblem&, Workspace, Stream) const override {
    ++c_->runs;
    return {};
  }

 private:
  std::string name_;
  Counts* c_;
};

}  // namespace mlakit::test
