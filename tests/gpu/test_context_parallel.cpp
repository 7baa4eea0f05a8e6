// Context parallelism on the GPU (docs/spec.md section 11, issue 12):
//  - ShardedDecode: every CUDA decode path decodes each rank's shard of a random batch (every format, s_q 1 and 4
//    causal, h_q 16, 63 and 128, world 2 and 3, interleave 1 and 64, lengths 0 and below the world size); the
//    partials merged by section 6 equal the unsharded CPU reference within section 10's tolerance, and a rank
//    that owns no visible token of a row gives lse = -inf. One GPU is enough.
//  - ShardHelpers: the helpers' kernels against their host loops, on the last GPU while GPU 0 is current.
//  - ContextParallelNccl (builds with NCCL): ContextParallelDecode over every visible GPU, one thread per rank,
//    on a communicator of ncclCommInitAll; every rank (root -1) or the root alone ends with the unsharded result,
//    and a graph-captured step replays on new inputs. The test is written for any world size.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "common/shard_merge.h"
#include "mlakit/context_parallel.h"
#include "mlakit/registry.h"
#include "device_case.h"
#include "test_cache_util.h"

#if MLAKIT_TEST_NCCL
#include <nccl.h>
#endif

namespace mlakit::test {
namespace {

constexpr uint8_t kPoison = 0xFF;

DType q_dtype_for(KvFormat f, uint64_t seed) {
  if (f == KvFormat::kBF16) return DType::kBF16;
  if (f == KvFormat::kFP16) return DType::kFP16;
  return seed % 2 == 0 ? DType::kBF16 : DType::kFP16;
}

/// Lengths with 0, 1 and 2 (below world sizes) among random ones up to max_len.
std::vector<int32_t> shard_lengths(std::mt19937_64& rng, int n, int max_len) {
  std::uniform_int_distribution<int32_t> dist(3, max_len);
  std::vector<int32_t> lens(static_cast<size_t>(n));
  for (int32_t& l : lens) l = dist(rng);
  lens[0] = 0;
  lens[1] = 1;
  lens[2] = 2;
  std::shuffle(lens.begin(), lens.end(), rng);
  return lens;
}

/// A case of `requests` random lengths up to max_len (with 0, 1 and 2), causal when s_q > 1.
DecodeCaseConfig random_config(KvFormat format, int64_t s_q, int64_t h_q, int requests, int max_len, uint64_t seed) {
  std::mt19937_64 rng(seed);
  DecodeCaseConfig cfg;
  cfg.seq_lens = shard_lengths(rng, requests, max_len);
  cfg.s_q = s_q;
  cfg.causal = s_q > 1;
  cfg.h_q = h_q;
  cfg.format = format;
  cfg.q_dtype = q_dtype_for(format, seed);
  cfg.seed = seed;
  return cfg;
}

std::string describe(const DecodeCaseConfig& c, ContextShard s) {
  std::string d = std::string("kv=") + kv_format_name(c.format) + " q=" + dtype_name(c.q_dtype) +
                  " P=" + std::to_string(c.page_size) + " s_q=" + std::to_string(c.s_q) + " h_q=" +
                  std::to_string(c.h_q) + " causal=" + std::to_string(c.causal) + " world=" + std::to_string(s.world) +
                  " interleave=" + std::to_string(s.interleave) + " seed=" + std::to_string(c.seed) + " seq_lens=";
  for (int32_t l : c.seq_lens) d += std::to_string(l) + ",";
  return d;
}

/// The unsharded result of `whole`, by the CPU reference, into a copy.
DecodeCase reference_result(const DecodeCase& whole) {
  DecodeCase r = whole;
  const Status st = reference_backend()->run(r.problem(), {}, nullptr);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return r;
}

::testing::AssertionResult same_result(const DecodeCase& got, const DecodeCase& want) {
  const int64_t d_v = want.config.dims.d_v();
  ::testing::AssertionResult r =
      check_out(got.out_floats(), want.out_floats(), want.row_vmax(), d_v, out_tolerance(want.config.q_dtype));
  if (!r) return r;
  return check_lse(got.lse, want.lse);
}

// ---------------------------------------------------------------- shards on one GPU, merged on the host

using ShardParam = std::tuple<std::string, KvFormat, int64_t /*h_q*/>;
class ShardedDecode : public ::testing::TestWithParam<ShardParam> {};

TEST_P(ShardedDecode, RanksMergeToTheUnshardedDecode) {
  const auto [name, format, h_q] = GetParam();
  std::string why;
  const Backend* be = cuda_backend(&why, name);
  if (be == nullptr) GTEST_SKIP() << why;
  uint64_t seed = 7000 + uint64_t(h_q) * 13 + uint64_t(format) * 1009;
  int ran = 0;
  for (int32_t world : {2, 3}) {
    for (int32_t interleave : {1, 64}) {
      for (int64_t s_q : {1, 4}) {
        DecodeCaseConfig cfg = random_config(format, s_q, h_q, 5, 900, seed++);
        cfg.page_size = interleave == 64 ? 16 : 64;
        const DecodeCase whole = DecodeCase::generate(cfg);
        SCOPED_TRACE(be->name() + " " + describe(cfg, {world, 0, interleave}));
        const DecodeCase want = reference_result(whole);
        ShardPartials parts;
        parts.rows = whole.batch * s_q * h_q;
        bool declined = false;
        for (int32_t rank = 0; rank < world && !declined; ++rank) {
          const ContextShard shard{world, rank, interleave};
          DecodeCase part = shard_case(whole, shard, cfg.seed * 7 + uint64_t(rank));
          DeviceDecodeCase d;
          d.upload(part, true, 0);
          const Status sup = be->supports(d.problem);
          // The documented fp8 row rule of the Hopper path (test_decode's DecodeSelection): a declined shape.
          if (sup.code() == StatusCode::kNotSupported && sup.message().find("query rows") != std::string::npos) {
            declined = true;
            break;
          }
          ASSERT_TRUE(sup.ok()) << sup.to_string();
          DeviceBuffer ws(be->workspace_bytes(d.problem));
          CACHE_TEST_CUDA(cudaMemset(ws.get(), kPoison, ws.bytes()));
          ASSERT_TRUE(be->plan(d.problem, {ws.get(), ws.bytes()}, nullptr).ok());
          const Status st = be->run(d.problem, {ws.get(), ws.bytes()}, nullptr);
          ASSERT_TRUE(st.ok()) << st.to_string();
          CACHE_TEST_CUDA(cudaDeviceSynchronize());
          const std::vector<uint16_t> out = d.out.download<uint16_t>(part.out.size());
          const std::vector<float> lse = d.lse.download<float>(part.lse.size());
          for (int64_t b = 0; b < whole.batch; ++b) {
            for (int64_t i = 0; i < s_q; ++i) {
              const int64_t len = cfg.seq_lens[size_t(b)];
              const bool none = shard.owned_before(cfg.causal ? len - s_q + i + 1 : len) == 0;
              const float l = lse[size_t((b * s_q + i) * h_q)];
              ASSERT_EQ(none, std::isinf(l) && l < 0) << "rank " << rank << " b=" << b << " i=" << i << " lse=" << l;
            }
          }
          parts.out.insert(parts.out.end(), out.begin(), out.end());
          parts.lse.insert(parts.lse.end(), lse.begin(), lse.end());
        }
        if (declined) continue;
        DecodeCase merged = whole;
        ASSERT_TRUE(merge_partials(*reference_backend(), parts, world, merged));
        EXPECT_TRUE(same_result(merged, want));
        ++ran;
      }
    }
  }
  if (ran == 0) GTEST_SKIP() << name << " declined every shape of this format and head count (fp8 row rule)";
}

INSTANTIATE_TEST_SUITE_P(ContextParallel, ShardedDecode,
                         ::testing::Combine(::testing::Values(std::string("cuda"), std::string("cuda_sm90")),
                                            ::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla),
                                            ::testing::Values(int64_t(16), int64_t(63), int64_t(128))));

// ---------------------------------------------------------------- the helpers' kernels

// The tensors live on the last GPU while GPU 0 is current (on a machine of one GPU both are 0): the helpers launch on
// their tensors' device and give the caller's current device back.
TEST(ShardHelpers, KernelsMatchTheHostLoops) {
  std::string why;
  if (cuda_backend(&why) == nullptr) GTEST_SKIP() << why;
  int devices = 0;
  CACHE_TEST_CUDA(cudaGetDeviceCount(&devices));
  const int dev = devices - 1;
  CACHE_TEST_CUDA(cudaSetDevice(dev));
  std::mt19937_64 rng(99);
  const int64_t b = 37, P = 16, columns = 40;
  std::vector<int32_t> lens(static_cast<size_t>(b)), qsl(static_cast<size_t>(b + 1), 0), table(static_cast<size_t>(b * columns));
  std::uniform_int_distribution<int32_t> len_dist(0, 2000), new_dist(0, 3), page_dist(-1, 500);
  for (int64_t r = 0; r < b; ++r) {
    lens[size_t(r)] = len_dist(rng);
    qsl[size_t(r + 1)] = qsl[size_t(r)] + new_dist(rng);
  }
  for (int32_t& e : table) e = page_dist(rng);
  const int64_t tokens = qsl.back() + 5;  // 5 padding tokens past the last request
  std::vector<int64_t> positions(static_cast<size_t>(tokens));
  std::uniform_int_distribution<int64_t> pos_dist(-2, 900);
  for (int64_t& p : positions) p = pos_dist(rng);
  DeviceBuffer d_lens, d_local, d_qsl, d_table, d_pos, d_slots;
  DeviceBuffer::upload(&d_lens, lens);
  DeviceBuffer::upload(&d_local, std::vector<int32_t>(size_t(b), -7));
  DeviceBuffer::upload(&d_qsl, qsl);
  DeviceBuffer::upload(&d_table, table);
  DeviceBuffer::upload(&d_pos, positions);
  DeviceBuffer::upload(&d_slots, std::vector<int64_t>(size_t(tokens), 99));
  CACHE_TEST_CUDA(cudaSetDevice(0));
  for (const ContextShard s : {ContextShard{2, 0, 1}, ContextShard{2, 1, 1}, ContextShard{3, 2, 64},
                               ContextShard{4, 1, 8}, ContextShard{1, 0, 1}}) {
    SCOPED_TRACE("world=" + std::to_string(s.world) + " rank=" + std::to_string(s.rank) +
                 " interleave=" + std::to_string(s.interleave));
    ShardSeqLensProblem lp;
    lp.shard = s;
    lp.seq_lens = TensorView::contiguous(d_lens.get(), DType::kInt32, {b}, Device::cuda(dev));
    lp.local_seq_lens = TensorView::contiguous(d_local.get(), DType::kInt32, {b}, Device::cuda(dev));
    ASSERT_TRUE(shard_seq_lens(lp).ok());
    std::vector<int32_t> want_local(static_cast<size_t>(b));
    ShardSeqLensProblem hp = lp;
    hp.seq_lens = TensorView::contiguous(lens.data(), DType::kInt32, {b});
    hp.local_seq_lens = TensorView::contiguous(want_local.data(), DType::kInt32, {b});
    ASSERT_TRUE(shard_seq_lens(hp).ok());

    ShardSlotMappingProblem sp;
    sp.shard = s;
    sp.positions = TensorView::contiguous(d_pos.get(), DType::kInt64, {tokens}, Device::cuda(dev));
    sp.query_start_loc = TensorView::contiguous(d_qsl.get(), DType::kInt32, {b + 1}, Device::cuda(dev));
    sp.block_table = TensorView::contiguous(d_table.get(), DType::kInt32, {b, columns}, Device::cuda(dev));
    sp.page_size = P;
    sp.slot_mapping = TensorView::contiguous(d_slots.get(), DType::kInt64, {tokens}, Device::cuda(dev));
    ASSERT_TRUE(shard_slot_mapping(sp).ok());
    std::vector<int64_t> want_slots(static_cast<size_t>(tokens));
    ShardSlotMappingProblem hs = sp;
    hs.positions = TensorView::contiguous(positions.data(), DType::kInt64, {tokens});
    hs.query_start_loc = TensorView::contiguous(qsl.data(), DType::kInt32, {b + 1});
    hs.block_table = TensorView::contiguous(table.data(), DType::kInt32, {b, columns});
    hs.slot_mapping = TensorView::contiguous(want_slots.data(), DType::kInt64, {tokens});
    ASSERT_TRUE(shard_slot_mapping(hs).ok());
    int current = -1;
    CACHE_TEST_CUDA(cudaGetDevice(&current));
    EXPECT_EQ(current, 0) << "the caller's current device was not given back";
    CACHE_TEST_CUDA(cudaSetDevice(dev));
    CACHE_TEST_CUDA(cudaDeviceSynchronize());
    EXPECT_EQ(d_local.download<int32_t>(size_t(b)), want_local);
    const std::vector<int64_t> got_slots = d_slots.download<int64_t>(size_t(tokens));
    EXPECT_EQ(got_slots, want_slots);
    int64_t owned = 0;
    for (int64_t v : want_slots) owned += v >= 0;
    EXPECT_GT(owned, 0);  // the case writes something
    CACHE_TEST_CUDA(cudaSetDevice(0));
  }
}

#if MLAKIT_TEST_NCCL

// ---------------------------------------------------------------- ContextParallelDecode over NCCL

/// Communicators over every visible GPU (one process, one thread per rank), NVLink multicast off
/// (the GPU machines' rule: NCCL_NVLS_ENABLE=0).
struct Group {
  std::vector<ncclComm_t> comms;
  explicit Group(int n) {
    setenv("NCCL_NVLS_ENABLE", "0", 1);
    setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
    setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
    comms.resize(size_t(n));
    if (ncclCommInitAll(comms.data(), n, nullptr) != ncclSuccess) comms.clear();
  }
  ~Group() {
    for (ncclComm_t c : comms) ncclCommDestroy(c);
  }
  int world() const { return int(comms.size()); }
};

int visible_gpus() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

/// One rank's state: its shard on its GPU, the ContextParallelDecode object and its workspace.
struct Rank {
  int rank = 0;
  DecodeCase part;
  DeviceDecodeCase d;
  DeviceBuffer ws;
  cudaStream_t stream = nullptr;
  std::string error;  // the first failure of this rank's thread
};

/// Runs f(rank) on one thread per rank (each on its GPU) and waits for all.
template <class F>
void on_every_rank(std::vector<Rank>& ranks, F f) {
  std::vector<std::thread> threads;
  for (Rank& r : ranks) {
    threads.emplace_back([&r, &f] {
      cudaSetDevice(r.rank);
      f(r);
    });
  }
  for (std::thread& t : threads) t.join();
}

/// The tests below: a group over every visible GPU (skipped without one), and the registry whose "cuda" merges.
class NcclGroupTest : public ::testing::Test {
 protected:
  void SetUp() override {
    n = visible_gpus();
    if (n < 1) GTEST_SKIP() << "no CUDA device";
    group = std::make_unique<Group>(n);
    ASSERT_EQ(group->world(), n) << "ncclCommInitAll failed";
  }
  static const Registry& registry() {
    static const Registry r = make_default_registry();
    return r;
  }
  int n = 0;
  std::unique_ptr<Group> group;
  const Backend& merge = *registry().get("cuda");
};

class ContextParallelNccl
    : public NcclGroupTest,
      public ::testing::WithParamInterface<std::tuple<KvFormat, int64_t /*s_q*/, int64_t /*h_q*/>> {};

TEST_P(ContextParallelNccl, EveryRankEndsWithTheUnshardedResult) {
  const auto [format, s_q, h_q] = GetParam();
  const Registry& registry = this->registry();
  uint64_t seed = 9100 + uint64_t(format) * 31 + uint64_t(s_q * 7 + h_q);
  for (int32_t interleave : {1, 64}) {
    for (int root : {-1, 0}) {
      const DecodeCaseConfig cfg = random_config(format, s_q, h_q, 6, 1500, seed++);
      const DecodeCase whole = DecodeCase::generate(cfg);
      SCOPED_TRACE(describe(cfg, {n, 0, interleave}) + " root=" + std::to_string(root));
      const DecodeCase want = reference_result(whole);

      std::vector<Rank> ranks(static_cast<size_t>(n));
      // Set up every rank and choose the decode path before any NCCL call, so that a refusal cannot leave the
      // other ranks waiting in a collective.
      std::vector<const Backend*> decode(size_t(n), nullptr);
      for (int r = 0; r < n; ++r) {
        CACHE_TEST_CUDA(cudaSetDevice(r));
        ranks[size_t(r)].rank = r;
        ranks[size_t(r)].part = shard_case(whole, {n, r, interleave}, cfg.seed * 5 + uint64_t(r));
        ranks[size_t(r)].d.upload(ranks[size_t(r)].part, true, r);
        const Selection sel = registry.select(ranks[size_t(r)].d.problem);
        ASSERT_TRUE(sel.status.ok()) << sel.status.to_string();
        decode[size_t(r)] = sel.backend;
        const ContextParallelDecode cp(*sel.backend, merge, group->comms[size_t(r)]);
        const Status sup = cp.supports(ranks[size_t(r)].d.problem);
        ASSERT_TRUE(sup.ok()) << sup.to_string();
        ranks[size_t(r)].ws.allocate(cp.workspace_bytes(ranks[size_t(r)].d.problem));
        CACHE_TEST_CUDA(cudaMemset(ranks[size_t(r)].ws.get(), kPoison, ranks[size_t(r)].ws.bytes()));
        CACHE_TEST_CUDA(cudaStreamCreate(&ranks[size_t(r)].stream));
      }
      on_every_rank(ranks, [&](Rank& rk) {
        const ContextParallelDecode cp(*decode[size_t(rk.rank)], merge, group->comms[size_t(rk.rank)]);
        const Workspace ws{rk.ws.get(), rk.ws.bytes()};
        Status st = cp.plan(rk.d.problem, ws, rk.stream);
        if (st.ok()) st = cp.run(rk.d.problem, ws, rk.stream, root);
        if (!st.ok()) rk.error = st.to_string();
        if (cudaStreamSynchronize(rk.stream) != cudaSuccess) rk.error += " stream failed";
      });
      for (Rank& rk : ranks) {
        SCOPED_TRACE("rank " + std::to_string(rk.rank) + " of " + std::to_string(n));
        ASSERT_TRUE(rk.error.empty()) << rk.error;
        CACHE_TEST_CUDA(cudaSetDevice(rk.rank));
        DecodeCase got = rk.part;
        got.out = rk.d.out.download<uint16_t>(got.out.size());
        got.lse = rk.d.lse.download<float>(got.lse.size());
        if (root < 0 || rk.rank == root) {
          EXPECT_TRUE(same_result(got, want));
        } else {  // not the root: out and lse untouched
          EXPECT_EQ(got.out, rk.part.out);
          for (float v : got.lse) ASSERT_TRUE(std::isnan(v));
        }
        cudaStreamDestroy(rk.stream);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(ContextParallel, ContextParallelNccl,
                         ::testing::Combine(::testing::Values(KvFormat::kBF16, KvFormat::kFP16, KvFormat::kFP8E4M3,
                                                              KvFormat::kFP8DsMla),
                                            ::testing::Values(int64_t(1), int64_t(4)),
                                            ::testing::Values(int64_t(16), int64_t(128))));

// A step captured once per rank (plan, shard decode, NCCL exchange, merge) replays on new contents of the same
// buffers: new q, cache and block table with the same lengths.
class ContextParallelNcclGraph : public NcclGroupTest {};

TEST_F(ContextParallelNcclGraph, CapturedStepReplaysOnNewInputs) {
  const Registry& registry = this->registry();
  DecodeCaseConfig cfg;
  cfg.seq_lens = {0, 1, 700, 4097, 33};
  cfg.s_q = 2;
  cfg.causal = true;
  cfg.h_q = 64;
  cfg.seed = 4242;
  const DecodeCase first = DecodeCase::generate(cfg);
  cfg.seed = 4343;
  const DecodeCase second = DecodeCase::generate(cfg);  // same lengths: the same page and table sizes
  const DecodeCase want_first = reference_result(first), want_second = reference_result(second);

  std::vector<Rank> ranks(static_cast<size_t>(n));
  std::vector<const Backend*> decode(size_t(n), nullptr);
  std::vector<cudaGraphExec_t> graphs(static_cast<size_t>(n), nullptr);
  for (int r = 0; r < n; ++r) {
    CACHE_TEST_CUDA(cudaSetDevice(r));
    Rank& rk = ranks[size_t(r)];
    rk.rank = r;
    rk.part = shard_case(first, {n, r, 1}, 17 + uint64_t(r));
    rk.d.upload(rk.part, true, r);
    const Selection sel = registry.select(rk.d.problem);
    ASSERT_TRUE(sel.status.ok()) << sel.status.to_string();
    decode[size_t(r)] = sel.backend;
    rk.ws.allocate(ContextParallelDecode(*sel.backend, merge, group->comms[size_t(r)]).workspace_bytes(rk.d.problem));
    CACHE_TEST_CUDA(cudaStreamCreate(&rk.stream));
  }
  on_every_rank(ranks, [&](Rank& rk) {
    const ContextParallelDecode cp(*decode[size_t(rk.rank)], merge, group->comms[size_t(rk.rank)]);
    const Workspace ws{rk.ws.get(), rk.ws.bytes()};
    // One eager step first, as an engine warms up before it captures: NCCL connects a communicator's peers on its
    // first collective, which cannot happen inside a capture.
    Status warm = cp.plan(rk.d.problem, ws, rk.stream);
    if (warm.ok()) warm = cp.run(rk.d.problem, ws, rk.stream);
    if (!warm.ok() || cudaStreamSynchronize(rk.stream) != cudaSuccess) {
      rk.error = "eager step before the capture: " + warm.to_string();
      return;
    }
    rk.d.refill(rk.part);  // outputs poisoned again: the replay must write them
    cudaGraph_t graph = nullptr;
    if (cudaStreamBeginCapture(rk.stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      rk.error = "begin capture failed";
      return;
    }
    Status st = cp.plan(rk.d.problem, ws, rk.stream);
    if (st.ok()) st = cp.run(rk.d.problem, ws, rk.stream);
    if (cudaStreamEndCapture(rk.stream, &graph) != cudaSuccess || !st.ok()) {
      rk.error = "capture: " + st.to_string();
      return;
    }
    if (cudaGraphInstantiate(&graphs[size_t(rk.rank)], graph, 0) != cudaSuccess) rk.error = "instantiate failed";
    cudaGraphDestroy(graph);
  });
  for (const DecodeCase* round : {&first, &second}) {
    const bool is_second = round == &second;
    if (is_second) {
      for (Rank& rk : ranks) {  // new contents, same buffers
        CACHE_TEST_CUDA(cudaSetDevice(rk.rank));
        rk.part = shard_case(second, {n, rk.rank, 1}, 17 + uint64_t(rk.rank));
        rk.d.refill(rk.part);
      }
    }
    on_every_rank(ranks, [&](Rank& rk) {
      if (!rk.error.empty()) return;
      if (cudaGraphLaunch(graphs[size_t(rk.rank)], rk.stream) != cudaSuccess ||
          cudaStreamSynchronize(rk.stream) != cudaSuccess) {
        rk.error = "graph launch failed";
      }
    });
    for (Rank& rk : ranks) {
      SCOPED_TRACE("rank " + std::to_string(rk.rank) + (is_second ? ", second replay" : ", first replay"));
      ASSERT_TRUE(rk.error.empty()) << rk.error;
      CACHE_TEST_CUDA(cudaSetDevice(rk.rank));
      DecodeCase got = rk.part;
      got.out = rk.d.out.download<uint16_t>(got.out.size());
      got.lse = rk.d.lse.download<float>(got.lse.size());
      EXPECT_TRUE(same_result(got, is_second ? want_second : want_first));
    }
  }
  for (Rank& rk : ranks) {
    cudaSetDevice(rk.rank);
    if (graphs[size_t(rk.rank)] != nullptr) cudaGraphExecDestroy(graphs[size_t(rk.rank)]);
    cudaStreamDestroy(rk.stream);
  }
}

#endif  // MLAKIT_TEST_NCCL

}  // namespace
}  // namespace mlakit::test
