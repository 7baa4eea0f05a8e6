// Prepared calls (include/mlakit/prepared.h, issue 11's host cost): a call checked once by Registry::prepare or
// Backend::prepare runs as Backend's own entry points do, bit for bit, without asking the backend again; it refuses
// what those refuse with the same messages (an invalid call, a backend that cannot serve it, a small workspace); it
// keeps its own copy of the problem; an unmade one refuses to run.

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/decode_case.h"
#include "common/picky_backend.h"
#include "mlakit/prepared.h"
#include "mlakit/registry.h"

namespace mlakit {
namespace {

using test::PickyBackend;

test::DecodeCase make_case(int64_t page_size, uint64_t seed = 3) {
  test::DecodeCaseConfig cfg;
  cfg.page_size = page_size;
  cfg.seq_lens = {0, 37, 200};
  cfg.h_q = 5;
  cfg.s_q = 2;
  cfg.causal = true;
  cfg.seed = seed;
  return test::DecodeCase::generate(cfg);
}

/// The default registry plus the counting backend, which then outranks the reference.
class PreparedCounting : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(r.add(std::make_unique<PickyBackend>("counting", &n)).ok()); }
  PickyBackend::Counts n;
  Registry r = make_default_registry();
};

TEST(Prepared, DecodeOnTheReferenceMatchesBackendEntryPointsBitForBit) {
  const Registry r = make_default_registry();
  test::DecodeCase c = make_case(64);
  const Backend& ref = *r.get("reference");
  std::vector<uint8_t> ws(ref.workspace_bytes(c.problem()) + 1);
  ASSERT_TRUE(ref.plan(c.problem(), Workspace{ws.data(), ws.size()}, nullptr).ok());
  ASSERT_TRUE(ref.run(c.problem(), Workspace{ws.data(), ws.size()}, nullptr).ok());
  const std::vector<uint16_t> want_out = c.out;
  const std::vector<float> want_lse = c.lse;

  c.poison_outputs();
  Prepared<DecodeProblem> call;
  ASSERT_TRUE(r.prepare(c.problem(), {}, &call).ok());
  ASSERT_NE(call.backend(), nullptr);
  EXPECT_EQ(call.backend()->name(), r.select(c.problem()).backend->name());  // the choice select() makes
  EXPECT_EQ(call.workspace_bytes(), ref.workspace_bytes(c.problem()));
  ASSERT_TRUE(call.plan(Workspace{ws.data(), ws.size()}, nullptr).ok());
  ASSERT_TRUE(call.run(Workspace{ws.data(), ws.size()}, nullptr).ok());
  ASSERT_EQ(c.out.size(), want_out.size());
  EXPECT_EQ(std::memcmp(c.out.data(), want_out.data(), want_out.size() * 2), 0);
  EXPECT_EQ(std::memcmp(c.lse.data(), want_lse.data(), want_lse.size() * 4), 0);
}

TEST_F(PreparedCounting, ChecksOnceThenRunsWithoutAskingAgain) {
  test::DecodeCase c = make_case(16);
  Prepared<DecodeProblem> call;
  ASSERT_TRUE(r.prepare(c.problem(), {}, &call).ok());
  EXPECT_EQ(call.backend()->name(), "counting");
  EXPECT_EQ(n.supports, 1);
  uint8_t ws[64];
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(call.plan(Workspace{ws, sizeof ws}, nullptr).ok());
    ASSERT_TRUE(call.run(Workspace{ws, sizeof ws}, nullptr).ok());
  }
  EXPECT_EQ(n.supports, 1);
  EXPECT_EQ(n.plans, 3);
  EXPECT_EQ(n.runs, 3);
  // Backend's own entry points ask on every call, as they always did.
  const Backend& b = *call.backend();
  ASSERT_TRUE(b.plan(c.problem(), Workspace{ws, sizeof ws}, nullptr).ok());
  ASSERT_TRUE(b.run(c.problem(), Workspace{ws, sizeof ws}, nullptr).ok());
  EXPECT_EQ(n.supports, 3);
}

TEST_F(PreparedCounting, RefusesASmallWorkspaceWithBackendsMessage) {
  test::DecodeCase c = make_case(16);
  Prepared<DecodeProblem> call;
  ASSERT_TRUE(r.prepare(c.problem(), {}, &call).ok());
  uint8_t ws[64];
  const Status s = call.run(Workspace{ws, 32}, nullptr);
  EXPECT_EQ(s.message(), "workspace.bytes=32: must be >= workspace_bytes(problem)=64");
  EXPECT_EQ(call.plan(Workspace{nullptr, 64}, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(n.runs, 0);
  EXPECT_EQ(n.plans, 0);
}

TEST_F(PreparedCounting, FailuresAreSelectsWithEveryReason) {
  test::DecodeCase c = make_case(64);

  // A named backend that cannot serve the call: its reason, and nothing else runs.
  Prepared<DecodeProblem> call;
  Status s = r.prepare(c.problem(), Preference{"counting"}, &call);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("page_size=64: counting takes only 16"), std::string::npos) << s.message();
  EXPECT_EQ(s.message(), r.select(c.problem(), Preference{"counting"}).failure().message());
  EXPECT_EQ(call.backend(), nullptr);
  EXPECT_EQ(call.run(Workspace{}, nullptr).message(),
            "prepared call: not made (call Registry::prepare or Backend::prepare first)");

  // An unknown name.
  s = r.prepare(c.problem(), Preference{"flash"}, &call);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("backend=flash: must be one of"), std::string::npos) << s.message();

  // An invalid call: validate()'s message, from Registry::prepare and Backend::prepare alike.
  DecodeProblem bad = c.problem();
  bad.softmax_scale = -1.0f;
  const Status why = bad.validate();
  ASSERT_FALSE(why.ok());
  EXPECT_EQ(r.prepare(bad, {}, &call).message(), why.message());
  EXPECT_EQ(r.get("reference")->prepare(bad, &call).message(), why.message());
  EXPECT_EQ(call.backend(), nullptr);

  // A call on the wrong device for the backend asked.
  const DecodeProblem on_gpu = c.problem(c.host_buffers(), Device::cuda(0));
  s = r.get("reference")->prepare(on_gpu, &call);
  EXPECT_EQ(s.code(), StatusCode::kNotSupported);
  EXPECT_NE(s.message().find("backend 'reference' takes cpu tensors"), std::string::npos) << s.message();
}

TEST(Prepared, KeepsItsOwnCopyOfTheProblem) {
  const Registry r = make_default_registry();
  test::DecodeCase c = make_case(64);
  DecodeProblem p = c.problem();
  Prepared<DecodeProblem> call;
  ASSERT_TRUE(r.prepare(p, {}, &call).ok());
  const void* checked_out = p.out.data;
  p.out.data = nullptr;  // the caller's copy changes afterwards; the prepared call runs what was checked
  p.softmax_scale = -1.0f;
  EXPECT_EQ(call.problem().out.data, checked_out);
  EXPECT_GT(call.problem().softmax_scale, 0.0f);
  std::vector<uint8_t> ws(call.workspace_bytes() + 1);
  EXPECT_TRUE(call.plan(Workspace{ws.data(), ws.size()}, nullptr).ok());
  EXPECT_TRUE(call.run(Workspace{ws.data(), ws.size()}, nullptr).ok());
}

// Host arrays are validated by content (block table ids, docs/spec.md section 1): a table changed after prepare must
// be refused at plan and run, not read out of bounds by the reference.
TEST(Prepared, HostContentsAreCheckedAgainWhenItRuns) {
  const Registry r = make_default_registry();
  test::DecodeCase c = make_case(64);
  Prepared<DecodeProblem> call;
  ASSERT_TRUE(r.prepare(c.problem(), {}, &call).ok());
  c.block_table[0] = int32_t(c.num_pages) + 7;  // request 0 has no token, request 1 reads row 1 of the table
  c.block_table[size_t(c.table_row_stride)] = int32_t(c.num_pages) + 7;
  const Status why = c.problem().validate();
  ASSERT_FALSE(why.ok());
  std::vector<uint8_t> ws(call.workspace_bytes() + 1);
  EXPECT_EQ(call.plan(Workspace{ws.data(), ws.size()}, nullptr).message(), why.message());
  EXPECT_EQ(call.run(Workspace{ws.data(), ws.size()}, nullptr).message(), why.message());
}

TEST(Prepared, SparseDecodeOnTheReferenceMatchesRun) {
  const Registry r = make_default_registry();
  test::SparseCaseConfig cfg;
  cfg.h_q = 3;
  cfg.s_q = 2;
  cfg.topk = 40;
  test::SparseCase c = test::SparseCase::generate(cfg);
  const Backend& ref = *r.get("reference");
  std::vector<uint8_t> ws(ref.workspace_bytes(c.problem()) + 1);
  ASSERT_TRUE(ref.run(c.problem(), Workspace{ws.data(), ws.size()}, nullptr).ok());
  const std::vector<uint16_t> want = c.out;
  c.poison_outputs();
  Prepared<SparseDecodeProblem> call;
  ASSERT_TRUE(r.prepare(c.problem(), {}, &call).ok());
  ASSERT_TRUE(call.run(Workspace{ws.data(), ws.size()}, nullptr).ok());
  EXPECT_EQ(std::memcmp(c.out.data(), want.data(), want.size() * 2), 0);
}

}  // namespace
}  // namespace mlakit
