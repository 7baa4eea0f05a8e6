// Concurrency (issue 11 item 4): 8 host threads, each with its own CUDA stream, workspace and outputs, run the same
// dense decode (plan + run) and sparse decode through the automatically selected CUDA paths, 20 times each, all at
// once. Every thread's every result must equal a single-threaded run bit for bit: no hidden global state, no scratch
// shared between calls, nothing tied to the default stream.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/decode_case.h"
#include "device_case.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

constexpr int kThreads = 8;
constexpr int kIterations = 20;

/// One call's outputs: out and lse bytes.
struct Result {
  std::vector<uint16_t> out;
  std::vector<float> lse;
  bool operator==(const Result& o) const {
    return out.size() == o.out.size() && lse.size() == o.lse.size() &&
           std::memcmp(out.data(), o.out.data(), out.size() * 2) == 0 &&
           std::memcmp(lse.data(), o.lse.data(), lse.size() * 4) == 0;  // NaN-free: compared as bytes
  }
};

/// One caller's own outputs and workspace for `problem` (allocated once, before the calls).
template <class Problem>
struct CallBuffers {
  DeviceBuffer out, lse, ws;
  CallBuffers(const Backend& be, const Problem& p, size_t out_elems, size_t lse_elems)
      : out(out_elems * 2), lse(lse_elems * 4), ws(be.workspace_bytes(p)) {}
};

/// Runs `problem` with its out/lse and workspace replaced by `b`'s on `stream`, then copies the outputs back.
template <class Problem>
Status run_on(const Backend& be, Problem p, cudaStream_t stream, CallBuffers<Problem>& b, Result* r) {
  if (b.out.get() == nullptr || b.lse.get() == nullptr || b.ws.get() == nullptr) return Status::internal("cudaMalloc failed");
  cudaMemsetAsync(b.ws.get(), 0xFF, b.ws.bytes(), stream);  // the caller need not zero the workspace
  cudaMemsetAsync(b.out.get(), 0xFF, b.out.bytes(), stream);  // outputs poisoned: a call that skips a write shows
  cudaMemsetAsync(b.lse.get(), 0xFF, b.lse.bytes(), stream);
  p.out.data = b.out.get();
  p.lse.data = b.lse.get();
  const Workspace w{b.ws.get(), b.ws.bytes()};
  if constexpr (std::is_same_v<Problem, DecodeProblem>) MLAKIT_TRY(be.plan(p, w, stream));
  MLAKIT_TRY(be.run(p, w, stream));
  r->out.resize(b.out.bytes() / 2);
  r->lse.resize(b.lse.bytes() / 4);
  cudaMemcpyAsync(r->out.data(), b.out.get(), b.out.bytes(), cudaMemcpyDeviceToHost, stream);
  cudaMemcpyAsync(r->lse.data(), b.lse.get(), b.lse.bytes(), cudaMemcpyDeviceToHost, stream);
  if (cudaStreamSynchronize(stream) != cudaSuccess) return Status::internal("cudaStreamSynchronize failed");
  return {};
}

/// A dense decode and a sparse decode call on device 0, their inputs uploaded once, and the backends selection chose.
/// The problems' outputs are the uploaded cases' own; every call replaces them with its own (run_on, call_into).
struct TwoCalls {
  DecodeCase dense;
  SparseCase sparse;
  DeviceDecodeCase dense_dev;
  DeviceSparseCase sparse_dev;
  DecodeProblem dp;
  SparseDecodeProblem sp;
  const Backend* dense_backend = nullptr;
  const Backend* sparse_backend = nullptr;
  std::string dense_why, sparse_why;  // the selections' explanations

  TwoCalls() {
    static const Registry registry = make_default_registry();
    DecodeCaseConfig dc;
    dc.seq_lens = {0, 1, 700, 2900, 64, 1500};
    dc.s_q = 2;
    dc.h_q = 64;
    dc.causal = true;
    dc.seed = 11;
    dense = DecodeCase::generate(dc);
    SparseCaseConfig sc;
    sc.batch = 4;
    sc.s_q = 2;
    sc.h_q = 32;
    sc.topk = 512;
    sc.num_pages = 20;
    sc.format = KvFormat::kFP8DsMla;
    sc.topk_length = {512, 0, 77, 300};
    sc.seed = 12;
    sparse = SparseCase::generate(sc);
    dense_dev.upload(dense, /*scale_on_device=*/false);
    sparse_dev.upload(sparse, /*scale_on_device=*/false);
    dp = dense_dev.problem;
    sp = sparse_dev.problem;
    const Selection dsel = registry.select(dp), ssel = registry.select(sp);
    dense_backend = dsel.backend;
    sparse_backend = ssel.backend;
    dense_why = dsel.explain();
    sparse_why = ssel.explain();
  }
  std::string names() const { return dense_backend->name() + ", " + sparse_backend->name(); }
};

/// One call of `c` on `be` (dense: plan, then run; sparse: run) with its outputs at out / lse and workspace `w`, on the
/// legacy default stream of whatever device the call makes current.
Status call_into(const Backend& be, const TwoCalls& c, bool sparse, void* out, void* lse, Workspace w) {
  if (sparse) {
    SparseDecodeProblem p = c.sp;
    p.out.data = out;
    p.lse.data = lse;
    return be.run(p, w, Stream{});
  }
  DecodeProblem p = c.dp;
  p.out.data = out;
  p.lse.data = lse;
  MLAKIT_TRY(be.plan(p, w, Stream{}));
  return be.run(p, w, Stream{});
}

/// out and lse of a call, copied back from the device (cudaMemcpy: after the device's earlier work).
Result download(const DeviceBuffer& out, const DeviceBuffer& lse) {
  Result r;
  r.out.resize(out.bytes() / 2);
  r.lse.resize(lse.bytes() / 4);
  cudaMemcpy(r.out.data(), out.get(), out.bytes(), cudaMemcpyDeviceToHost);
  cudaMemcpy(r.lse.data(), lse.get(), lse.bytes(), cudaMemcpyDeviceToHost);
  return r;
}

TEST(Concurrency, EightThreadsWithTheirOwnStreamsAgree) {
  std::string why;
  if (cuda_backend(&why, "cuda") == nullptr) GTEST_SKIP() << why;
  cudaSetDevice(0);
  TwoCalls c;
  ASSERT_NE(c.dense_backend, nullptr) << c.dense_why;
  ASSERT_NE(c.sparse_backend, nullptr) << c.sparse_why;
  const Backend* dsel = c.dense_backend;
  const Backend* ssel = c.sparse_backend;
  const DecodeProblem& dp = c.dp;
  const SparseDecodeProblem& sp = c.sp;
  const DecodeCase& dense = c.dense;
  const SparseCase& sparse = c.sparse;

  Result dense_ref, sparse_ref;
  {
    CallBuffers<DecodeProblem> db(*dsel, dp, dense.out.size(), dense.lse.size());
    CallBuffers<SparseDecodeProblem> sb(*ssel, sp, sparse.out.size(), sparse.lse.size());
    ASSERT_TRUE(run_on(*dsel, dp, nullptr, db, &dense_ref).ok());
    ASSERT_TRUE(run_on(*ssel, sp, nullptr, sb, &sparse_ref).ok());
  }

  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      cudaSetDevice(0);
      cudaStream_t stream = nullptr;
      if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        errors[size_t(t)] = "cudaStreamCreate failed";
        return;
      }
      CallBuffers<DecodeProblem> db(*dsel, dp, dense.out.size(), dense.lse.size());
      CallBuffers<SparseDecodeProblem> sb(*ssel, sp, sparse.out.size(), sparse.lse.size());
      for (int i = 0; i < kIterations && errors[size_t(t)].empty(); ++i) {
        Result d, s;
        Status st = run_on(*dsel, dp, stream, db, &d);
        if (st.ok()) st = run_on(*ssel, sp, stream, sb, &s);
        if (!st.ok()) errors[size_t(t)] = st.to_string();
        mismatches[size_t(t)] += !(d == dense_ref) + !(s == sparse_ref);
      }
      cudaStreamDestroy(stream);
    });
  }
  for (std::thread& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_TRUE(errors[size_t(t)].empty()) << "thread " << t << ": " << errors[size_t(t)];
    EXPECT_EQ(mismatches[size_t(t)], 0) << "thread " << t << " (" << c.names() << ")";
  }
}

// A call runs on its tensors' device, whatever device the calling thread has current (docs/backends.md, "Which
// GPU"), and gives the caller's current device back: inputs, outputs and workspace on device 0, device 1 current, on
// every CUDA backend that serves the calls (each has its own entry points and guards). The workspace is poisoned
// first, so a plan that did not run on device 0 leaves the run nothing valid to read, and both devices are synchronised
// afterwards, so a fault on device 1 shows. Needs two GPUs; the results must equal those of the same calls made with
// device 0 current, bit for bit.
TEST(Concurrency, CallsRunOnTheirTensorsDeviceNotTheCurrentOne) {
  std::string why;
  if (cuda_backend(&why, "cuda") == nullptr) GTEST_SKIP() << why;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) GTEST_SKIP() << "needs two CUDA devices";
  cudaSetDevice(0);
  TwoCalls c;
  int ran = 0;
  for (const char* name : {"cuda", "cuda_sm90"}) {
    const Backend* be = cuda_backend(&why, name);
    if (be == nullptr) continue;  // cuda_sm90 off Hopper
    for (bool sparse : {false, true}) {
      SCOPED_TRACE(std::string(name) + (sparse ? " sparse decode" : " dense decode"));
      const Status serves = sparse ? be->supports(c.sp) : be->supports(c.dp);
      if (!serves.ok()) continue;  // e.g. a rule of the Hopper path
      ++ran;
      cudaSetDevice(0);
      CallBuffers<DecodeProblem> db(*be, c.dp, c.dense.out.size(), c.dense.lse.size());
      CallBuffers<SparseDecodeProblem> sb(*be, c.sp, c.sparse.out.size(), c.sparse.lse.size());
      Result ref;
      ASSERT_TRUE((sparse ? run_on(*be, c.sp, nullptr, sb, &ref) : run_on(*be, c.dp, nullptr, db, &ref)).ok());
      DeviceBuffer& out = sparse ? sb.out : db.out;
      DeviceBuffer& lse = sparse ? sb.lse : db.lse;
      DeviceBuffer& ws = sparse ? sb.ws : db.ws;
      for (DeviceBuffer* b : {&out, &lse, &ws}) cudaMemset(b->get(), 0xFF, b->bytes());
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

      ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
      const Status st = call_into(*be, c, sparse, out.get(), lse.get(), Workspace{ws.get(), ws.bytes()});
      ASSERT_TRUE(st.ok()) << st.to_string();
      int current = -1;
      cudaGetDevice(&current);
      EXPECT_EQ(current, 1) << "the caller's current device was not given back";
      EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "device 1";
      cudaSetDevice(0);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "device 0";
      EXPECT_TRUE(download(out, lse) == ref);
    }
  }
  EXPECT_GT(ran, 0) << "no CUDA backend served the calls";
}

// A call whose tensors name a device this process does not see (cuda:<device count>) is refused by each CUDA backend
// with that reason before anything touches a device (availability is asked for the call's device, not the current
// one), and no workspace is sized for it.
TEST(Concurrency, CallsOnADeviceThisProcessLacksAreRefusedByName) {
  std::string why;
  if (cuda_backend(&why, "cuda") == nullptr) GTEST_SKIP() << why;
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  DecodeCaseConfig cfg;
  cfg.seq_lens = {40, 3};
  cfg.h_q = 16;
  DecodeCase dense = DecodeCase::generate(cfg);
  const DecodeProblem p = dense.problem(dense.host_buffers(), Device::cuda(devices));  // never dereferenced
  const std::string reason = "cuda:" + std::to_string(devices) + ": no such CUDA device (this process sees " +
                             std::to_string(devices) + ")";
  static const Registry registry = make_default_registry();
  for (const char* name : {"cuda", "cuda_sm90"}) {
    const Backend* be = registry.get(name);
    ASSERT_NE(be, nullptr) << name;
    EXPECT_EQ(be->supports(p).message(), "backend '" + std::string(name) + "' is not available: " + reason);
    EXPECT_EQ(be->workspace_bytes(p), 0u) << name;
  }
}

// What a CUDA backend sets up once per (host thread, device, kernel) before its first launch, the kernel's dynamic
// shared-memory allowance (cuda/common/device.h, allow_dynamic_smem), is a setting of each device: the same dense and
// sparse decode calls made from one thread on device 0 and then on device 1 (inputs uploaded to each) must both launch
// and give the same bytes. A record of the setting keyed without the device makes device 1's launches fail.
TEST(Concurrency, TheSameKernelsLaunchOnEachDeviceInTurn) {
  std::string why;
  if (cuda_backend(&why, "cuda") == nullptr) GTEST_SKIP() << why;
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 2) GTEST_SKIP() << "needs two CUDA devices";
  const TwoCalls c;  // on device 0: its cases and selections, reused below
  ASSERT_NE(c.dense_backend, nullptr) << c.dense_why;
  ASSERT_NE(c.sparse_backend, nullptr) << c.sparse_why;
  for (bool sparse : {false, true}) {
    SCOPED_TRACE(sparse ? "sparse decode" : "dense decode");
    const Backend& be = sparse ? *c.sparse_backend : *c.dense_backend;
    if (!be.available_on(Device::cuda(1)).ok()) {  // two different GPUs: device 0's choice does not run on device 1
      GTEST_SKIP() << be.name() << " is not available on cuda:1";
    }
    Result on[2];
    for (int device = 0; device < 2; ++device) {
      DeviceDecodeCase d;
      DeviceSparseCase s;
      if (sparse) {
        s.upload(c.sparse, /*scale_on_device=*/false, device);
      } else {
        d.upload(c.dense, /*scale_on_device=*/false, device);
      }
      const size_t ws_bytes = sparse ? be.workspace_bytes(s.problem) : be.workspace_bytes(d.problem);
      DeviceBuffer ws(ws_bytes);
      cudaMemset(ws.get(), 0xFF, ws.bytes());
      const Workspace w{ws.get(), ws.bytes()};
      Status st;
      if (sparse) {
        st = be.run(s.problem, w, Stream{});
      } else {
        st = be.plan(d.problem, w, Stream{});
        if (st.ok()) st = be.run(d.problem, w, Stream{});
      }
      ASSERT_TRUE(st.ok()) << be.name() << " on cuda:" << device << ": " << st.to_string();
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess) << "cuda:" << device;
      on[device] = sparse ? download(s.out, s.lse) : download(d.out, d.lse);
    }
    cudaSetDevice(0);
    EXPECT_TRUE(on[1] == on[0]) << be.name() << ": cuda:1 differs from cuda:0";
  }
}

// One workspace used by one call after another on one stream, alternating between the CUDA backends (issue 11's
// "workspace shared between two backends"): nothing one call leaves in it (its schedule, partial rows) may change the
// next one's result. Every result must equal the same backend's result with a workspace of its own, bit for bit.
// (Calls that may run at the same time, on two streams or threads, need a workspace each: include/mlakit/types.h.)
TEST(Concurrency, OneWorkspaceServesBothBackendsInTurn) {
  std::string why;
  if (cuda_backend(&why, "cuda") == nullptr) GTEST_SKIP() << why;
  cudaSetDevice(0);
  TwoCalls c;
  for (bool sparse : {false, true}) {
    std::vector<const Backend*> backends;
    for (const char* name : {"cuda", "cuda_sm90"}) {
      const Backend* be = cuda_backend(&why, name);
      if (be != nullptr && (sparse ? be->supports(c.sp) : be->supports(c.dp)).ok()) backends.push_back(be);
    }
    if (backends.size() < 2) continue;  // off Hopper, or a rule of the Hopper path: nothing to alternate with
    SCOPED_TRACE(sparse ? "sparse decode" : "dense decode");
    std::vector<Result> own(backends.size());
    size_t shared_bytes = 0;
    for (size_t i = 0; i < backends.size(); ++i) {
      const Backend& be = *backends[i];
      CallBuffers<DecodeProblem> db(be, c.dp, c.dense.out.size(), c.dense.lse.size());
      CallBuffers<SparseDecodeProblem> sb(be, c.sp, c.sparse.out.size(), c.sparse.lse.size());
      ASSERT_TRUE((sparse ? run_on(be, c.sp, nullptr, sb, &own[i]) : run_on(be, c.dp, nullptr, db, &own[i])).ok());
      shared_bytes = std::max(shared_bytes, sparse ? be.workspace_bytes(c.sp) : be.workspace_bytes(c.dp));
    }
    DeviceBuffer ws(shared_bytes), out(own[0].out.size() * 2), lse(own[0].lse.size() * 4);
    cudaMemset(ws.get(), 0xFF, ws.bytes());  // poisoned once, never again: each call sees what the last one left
    const Workspace w{ws.get(), ws.bytes()};
    for (int round = 0; round < 3; ++round) {
      for (size_t i = 0; i < backends.size(); ++i) {
        const Backend& be = *backends[i];
        cudaMemset(out.get(), 0xFF, out.bytes());
        cudaMemset(lse.get(), 0xFF, lse.bytes());
        const Status st = call_into(be, c, sparse, out.get(), lse.get(), w);
        ASSERT_TRUE(st.ok()) << be.name() << ": " << st.to_string();
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        EXPECT_TRUE(download(out, lse) == own[i]) << be.name() << ", round " << round;
      }
    }
  }
}

}  // namespace
}  // namespace mlakit::test
