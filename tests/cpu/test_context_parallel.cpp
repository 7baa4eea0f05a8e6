// Context parallelism on the CPU (docs/spec.md section 11): the ownership rule against brute force, every rank's
// shard through the reference decode merged by the reference merge against the unsharded decode (every format,
// causal s_q 4, lengths below the world size and 0), the shard helpers on host tensors, and validation.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "common/shard_merge.h"
#include "mlakit/context_parallel.h"
#include "mlakit/registry.h"

namespace mlakit::test {
namespace {

TEST(ContextShardRule, MatchesBruteForce) {
  for (int32_t world = 1; world <= 5; ++world) {
    for (int32_t interleave : {1, 2, 3, 64}) {
      std::vector<int64_t> next_local(size_t(world), 0);  // next local index each rank hands out
      const int64_t n_max = 3 * int64_t(world) * interleave + 7;
      for (int64_t t = 0; t <= n_max; ++t) {
        for (int32_t rank = 0; rank < world; ++rank) {
          const ContextShard s{world, rank, interleave};
          ASSERT_EQ(s.owned_before(t), next_local[size_t(rank)]) << "world=" << world << " I=" << interleave
                                                                 << " rank=" << rank << " n=" << t;
        }
        const ContextShard any{world, 0, interleave};
        const int32_t owner = any.owner(t);
        ASSERT_EQ(owner, int32_t((t / interleave) % world));
        ASSERT_EQ(any.local_index(t), next_local[size_t(owner)]) << "t=" << t;  // owned tokens in order, no gap
        ++next_local[size_t(owner)];
      }
      EXPECT_EQ((ContextShard{world, 0, interleave}.owned_before(-5)), 0);
    }
  }
}

std::string describe(const DecodeCaseConfig& cfg, ContextShard s) {
  std::string d = std::string("kv=") + kv_format_name(cfg.format) + " q=" + dtype_name(cfg.q_dtype) +
                  " P=" + std::to_string(cfg.page_size) + " s_q=" + std::to_string(cfg.s_q) +
                  " h_q=" + std::to_string(cfg.h_q) + " causal=" + (cfg.causal ? "1" : "0") +
                  " world=" + std::to_string(s.world) + " interleave=" + std::to_string(s.interleave) + " seq_lens=";
  for (int32_t l : cfg.seq_lens) d += std::to_string(l) + ",";
  return d;
}

/// Every rank's shard through `decode`, merged by the reference: equal to the unsharded reference decode within
/// docs/spec.md section 10's tolerance; ranks holding no visible token of a row give lse = -inf.
void expect_shards_merge_to_whole(const DecodeCaseConfig& cfg, int32_t world, int32_t interleave) {
  const Registry registry = make_default_registry();
  const Backend& ref = *registry.get("reference");
  DecodeCase whole = DecodeCase::generate(cfg);
  ASSERT_TRUE(ref.run(whole.problem(), {}, nullptr).ok());
  ShardPartials parts;
  parts.rows = whole.batch * cfg.s_q * cfg.h_q;
  const int64_t d_v = cfg.dims.d_v();
  for (int32_t rank = 0; rank < world; ++rank) {
    const ContextShard shard{world, rank, interleave};
    SCOPED_TRACE(describe(cfg, shard) + " rank=" + std::to_string(rank));
    DecodeCase part = shard_case(whole, shard, cfg.seed * 31 + uint64_t(rank));
    const DecodeProblem p = part.problem();
    ASSERT_TRUE(p.validate().ok()) << p.validate().to_string();
    const Status st = ref.run(p, {}, nullptr);
    ASSERT_TRUE(st.ok()) << st.to_string();
    parts.out.insert(parts.out.end(), part.out.begin(), part.out.end());
    parts.lse.insert(parts.lse.end(), part.lse.begin(), part.lse.end());
    // A row sees no key of this rank exactly when the rank owns none of its visible global tokens.
    for (int64_t b = 0; b < whole.batch; ++b) {
      for (int64_t i = 0; i < cfg.s_q; ++i) {
        const int64_t global_len = cfg.seq_lens[size_t(b)];
        const int64_t visible = cfg.causal ? global_len - cfg.s_q + i + 1 : global_len;
        const bool none = shard.owned_before(visible) == 0;
        const float lse = part.lse[size_t((b * cfg.s_q + i) * cfg.h_q)];
        EXPECT_EQ(none, std::isinf(lse) && lse < 0) << "b=" << b << " i=" << i << " lse=" << lse;
      }
    }
  }
  DecodeCase merged = whole;
  merged.poison_outputs();
  ASSERT_TRUE(merge_partials(ref, parts, world, merged));
  SCOPED_TRACE(describe(cfg, {world, 0, interleave}));
  EXPECT_TRUE(check_out(merged.out_floats(), whole.out_floats(), whole.row_vmax(), d_v, out_tolerance(cfg.q_dtype)));
  EXPECT_TRUE(check_lse(merged.lse, whole.lse));
}

using ShardParams = std::tuple<KvFormat, int32_t /*world*/, int32_t /*interleave*/, int64_t /*s_q*/>;
class ReferenceShards : public ::testing::TestWithParam<ShardParams> {};

TEST_P(ReferenceShards, MergeToTheUnshardedDecode) {
  const auto [format, world, interleave, s_q] = GetParam();
  DecodeCaseConfig cfg;
  cfg.format = format;
  cfg.s_q = s_q;
  cfg.causal = s_q > 1;
  cfg.h_q = 3;
  cfg.page_size = 16;
  cfg.seq_lens = {0, 1, 2, 3, 5, 64, 130, 200};  // 0, below the world size, not a multiple of it
  cfg.seed = uint64_t(world * 100 + interleave * 10 + s_q);
  expect_shards_merge_to_whole(cfg, world, interleave);
}

INSTANTIATE_TEST_SUITE_P(ContextParallel, ReferenceShards,
                         ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla),
                                            ::testing::Values(1, 2, 3), ::testing::Values(1, 64),
                                            ::testing::Values(int64_t(1), int64_t(4))));

TEST(ContextShardHelpers, SeqLensOnHostTensors) {
  const std::vector<int32_t> global{0, 1, 2, 63, 64, 65, 1000, 131072};
  for (const ContextShard s : {ContextShard{2, 1, 1}, ContextShard{3, 2, 64}, ContextShard{1, 0, 1}}) {
    std::vector<int32_t> local(global.size(), -7);
    ShardSeqLensProblem p;
    p.shard = s;
    p.seq_lens = TensorView::contiguous(global.data(), DType::kInt32, {int64_t(global.size())});
    p.local_seq_lens = TensorView::contiguous(local.data(), DType::kInt32, {int64_t(local.size())});
    ASSERT_TRUE(shard_seq_lens(p).ok());
    for (size_t b = 0; b < global.size(); ++b) EXPECT_EQ(local[b], s.owned_before(global[b])) << b;
  }
}

TEST(ContextShardHelpers, SlotMappingOnHostTensors) {
  // Three requests: 2 new tokens, 0, 3; then 2 padding tokens that no request holds.
  const std::vector<int32_t> qsl{0, 2, 2, 5};
  const std::vector<int64_t> positions{7, 8, 0, 1, -1, 3, 4};
  const int64_t P = 2, columns = 4;
  const std::vector<int32_t> table{10, 11, 12, -1,  20, 21, 22, 23,  30, -1, 31, 32};
  const ContextShard s{2, 1, 1};
  std::vector<int64_t> slots(positions.size(), 99);
  ShardSlotMappingProblem p;
  p.shard = s;
  p.positions = TensorView::contiguous(positions.data(), DType::kInt64, {int64_t(positions.size())});
  p.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {4});
  p.block_table = TensorView::contiguous(table.data(), DType::kInt32, {3, columns});
  p.page_size = P;
  p.slot_mapping = TensorView::contiguous(slots.data(), DType::kInt64, {int64_t(slots.size())});
  ASSERT_TRUE(shard_slot_mapping(p).ok());
  // Rank 1 of 2 owns the odd positions; position t is its local token t / 2.
  //  token 0: request 0, position 7 -> local 3 -> page table[0][1] = 11, row 1 -> 23
  //  token 1: request 0, position 8 -> rank 0 -> -1
  //  token 2: request 2, position 0 -> rank 0 -> -1;  token 3: position 1 -> local 0 -> page 30, row 0 -> 60
  //  token 4: request 2, position -1 -> -1;  tokens 5, 6: past query_start_loc[b] -> -1
  EXPECT_EQ(slots, (std::vector<int64_t>{23, -1, -1, 60, -1, -1, -1}));
}

TEST(ContextShardValidation, NamesFieldValueAndRule) {
  DecodeCaseConfig cfg;
  DecodeCase c = DecodeCase::generate(cfg);
  DecodeProblem p = c.problem();
  p.shard = {0, 0, 1};
  EXPECT_EQ(p.validate().message(), "shard.world=0: must be in [1, 1073741824] (GPUs of the context-parallel group)");
  p.shard = {2, 2, 1};
  EXPECT_EQ(p.validate().message(), "shard.rank=2: must be in [0, 1] (shard.world - 1)");
  p.shard = {2, 0, 0};
  EXPECT_EQ(p.validate().message(), "shard.interleave=0: must be in [1, 1073741824] (tokens per run)");
  p.shard = {1 << 16, 0, 1 << 15};
  EXPECT_EQ(p.validate().message(), "shard.world * shard.interleave=2147483648: must be at most 2^30");
  // A block table too short for this rank's tokens is named with the rank.
  p.shard = {2, 0, 1};
  c.seq_lens[1] = int32_t(2 * c.table_columns * cfg.page_size + 2);
  EXPECT_EQ(p.validate().message(),
            "seq_lens[1]=" + std::to_string(c.seq_lens[1]) + ": shard rank 0 of 2 holds " +
                std::to_string(c.table_columns * cfg.page_size + 1) +
                " of these tokens, more than max_pages * page_size = " +
                std::to_string(c.table_columns * cfg.page_size));
}

TEST(ContextParallelDecodeObject, SaysWhyItCannotRun) {
  const Registry registry = make_default_registry();
  const Backend& ref = *registry.get("reference");
  const ContextParallelDecode cp(ref, ref, nullptr);
  EXPECT_FALSE(cp.status().ok());
  const std::string info = nccl_build_info();
  if (info.rfind("nccl=OFF", 0) == 0) {
    EXPECT_NE(cp.status().message().find("this build has no NCCL"), std::string::npos) << cp.status().message();
  } else {
    EXPECT_EQ(cp.status().message(), "comm: null (an ncclComm_t from ncclCommInitRank or a ProcessGroup)");
  }
}

}  // namespace
}  // namespace mlakit::test
