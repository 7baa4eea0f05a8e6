// `mlakit bench --mode cp` (issue 12): decode context parallelism over the GPUs of this process, one thread per GPU
// on communicators of ncclCommInitAll (no MPI, no torchrun). For each shape: the whole problem decoded on GPU 0
// alone, then the same global problem sharded over N GPUs (each rank holding its tokens by docs/spec.md section 11)
// through ContextParallelDecode: the step time (max over the ranks, median over repetitions, caches flushed and the
// ranks started together), the shard's decode alone, their difference (exchange + merge), and the host time per
// call. Correctness is tests/gpu/test_context_parallel.cpp's job; the rows here are not compared with the reference.

#include <atomic>
#include <barrier>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "cp_bench.h"
#include "decode_spec.h"
#include "decode_workload.h"
#include "device_memory.h"
#include "mlakit/context_parallel.h"

namespace mlakit::cli {
namespace {

constexpr uint64_t kSeed = 20261123;
constexpr int kHostCalls = 10;

/// issue 12's three target shapes.
std::vector<DecodeSpec> cp_presets() {
  DecodeSpec a;  // one long request at 16 heads: memory-bound, FlashMLA's weakest shape
  a.batch = 1;
  a.ctx = 1048576;
  a.h_q = 16;
  DecodeSpec b;  // long requests at 128 heads
  b.batch = 8;
  b.ctx = 131072;
  b.h_q = 128;
  DecodeSpec c;  // a large batch of short requests: the exchange and merge dominate
  c.batch = 128;
  c.ctx = 4096;
  c.h_q = 128;
  return {a, b, c};
}

struct CpRow {
  DecodeSpec spec;
  std::string backend = "-";
  Status status;
  int world = 0;
  double one_gpu_ms = 0, step_ms = 0, shard_ms = 0, host_us = 0;
};

/// Plan + run timed `iters` times after flushing the cache; the median.
Status time_calls(DeviceMemory* mem, int64_t iters, const std::function<Status()>& call, std::vector<double>* ms) {
  ms->clear();
  for (int64_t i = 0; i < iters; ++i) {
    MLAKIT_TRY(mem->flush_cache());
    double t = 0;
    MLAKIT_TRY(mem->time_ms(call, &t));
    ms->push_back(t);
  }
  return {};
}

/// The unsharded problem on GPU 0.
Status one_gpu(const DecodeSpec& spec, const Registry& registry, const Preference& pref, int64_t iters, CpRow* row) {
  if (cudaSetDevice(0) != cudaSuccess) return Status::cuda_error("cudaSetDevice(0) failed");
  std::unique_ptr<DeviceMemory> mem;
  MLAKIT_TRY(make_cuda_memory(&mem));
  std::unique_ptr<DecodeWorkload> w;
  MLAKIT_TRY(DecodeWorkload::create(spec, mem.get(), kSeed, &w));
  const Selection sel = registry.select(w->problem(), pref);
  if (!sel.backend) return sel.status;
  Buffer ws;
  MLAKIT_TRY(allocate_buffer(mem.get(), &ws, sel.backend->workspace_bytes(w->problem()), "workspace"));
  const Workspace wsv{ws.get(), ws.bytes()};
  std::vector<double> ms;
  MLAKIT_TRY(time_calls(mem.get(), iters, [&]() -> Status {
    MLAKIT_TRY(sel.backend->plan(w->problem(), wsv, mem->stream()));
    return sel.backend->run(w->problem(), wsv, mem->stream());
  }, &ms));
  row->one_gpu_ms = median(ms);
  return {};
}

/// One rank of the sharded run (on its own thread and GPU).
struct Rank {
  int rank = 0;
  Status status;
  std::vector<double> step_ms, shard_ms;
  double host_us = 0;
  std::string backend;
};

void run_rank(const DecodeSpec& spec, int world, int interleave, const Registry& registry, const Preference& pref,
              int64_t iters, ncclComm_t comm, std::barrier<>& sync, std::atomic<bool>& failed, Rank* r) {
  // Every rank reaches every barrier, also after a failure (the others would wait forever), and after a barrier no
  // rank calls NCCL once any rank has failed (a collective would wait for it forever). The caller reports it.
  bool ok = true;
  const auto fail = [&](Status s) {
    if (ok) r->status = std::move(s);
    ok = false;
    failed = true;
  };
  const auto barrier = [&] {
    sync.arrive_and_wait();
    if (failed) ok = false;
  };
  std::unique_ptr<DeviceMemory> mem;
  std::unique_ptr<DecodeWorkload> w;
  Buffer lens, ws, shard_ws, flag;
  DecodeProblem p;
  const Backend* decode = nullptr;
  std::unique_ptr<ContextParallelDecode> cp;
  const ContextShard shard{world, r->rank, interleave};
  {
    Status s = cudaSetDevice(r->rank) == cudaSuccess ? Status{} : Status::cuda_error("cudaSetDevice failed");
    if (s.ok()) s = make_cuda_memory(&mem);
    DecodeSpec local = spec;
    local.ctx = shard.owned_before(spec.ctx);  // this rank's tokens: the workload's cache and table
    if (s.ok()) s = DecodeWorkload::create(local, mem.get(), kSeed + uint64_t(r->rank), &w);
    if (s.ok()) s = allocate_buffer(mem.get(), &lens, size_t(spec.batch) * 4, "global seq_lens");
    if (s.ok()) {
      const std::vector<int32_t> global(size_t(spec.batch), int32_t(spec.ctx));
      s = mem->upload(lens.get(), global.data(), lens.bytes());
    }
    if (s.ok()) {
      p = w->problem();
      p.seq_lens = TensorView::contiguous(lens.get(), DType::kInt32, {spec.batch}, mem->device());
      p.shard = shard;
      const Selection sel = registry.select(p, pref);
      decode = sel.backend;
      if (decode == nullptr) s = sel.status;
    }
    if (s.ok()) {
      r->backend = decode->name();
      cp = std::make_unique<ContextParallelDecode>(*decode, *registry.get("cuda"), comm);
      s = cp->supports(p);
    }
    if (s.ok()) s = allocate_buffer(mem.get(), &ws, cp->workspace_bytes(p), "workspace");
    if (s.ok()) s = allocate_buffer(mem.get(), &shard_ws, decode->workspace_bytes(p), "shard workspace");
    if (s.ok()) s = allocate_buffer(mem.get(), &flag, sizeof(float), "barrier flag");
    if (s.ok()) s = mem->fill_bytes(flag.get(), 0, sizeof(float));
    if (!s.ok()) fail(s);
  }
  barrier();  // set up everywhere (or failed somewhere: the caller sees it after the join)
  const Workspace wsv{ws.get(), ws.bytes()}, shard_wsv{shard_ws.get(), shard_ws.bytes()};
  // Before each timed call the ranks meet on the device (a one-element all-reduce in the stream, ahead of the start
  // event), so a timing holds the step, not the ranks' host skew: in an engine the previous layer's collectives
  // keep them in step the same way.
  const auto device_barrier = [&]() -> Status {
    if (ncclAllReduce(flag.get(), flag.get(), 1, ncclFloat32, ncclSum, comm, static_cast<cudaStream_t>(mem->stream())) !=
        ncclSuccess) {
      return Status::cuda_error("ncclAllReduce (device barrier) failed");
    }
    return {};
  };
  const auto step = [&]() -> Status {
    MLAKIT_TRY(cp->plan(p, wsv, mem->stream()));
    return cp->run(p, wsv, mem->stream());
  };
  // `iters` timed calls of `call` into *ms, every rank's cache flushed and the ranks started together each time.
  const auto timed = [&](const std::function<Status()>& call, std::vector<double>* ms) {
    for (int64_t i = 0; i < iters; ++i) {
      if (ok) {
        Status s = mem->flush_cache();
        if (s.ok() && cudaStreamSynchronize(static_cast<cudaStream_t>(mem->stream())) != cudaSuccess) {
          s = Status::cuda_error("stream failed");
        }
        if (!s.ok()) fail(s);
      }
      barrier();
      double t = 0;
      if (ok) {
        Status s = device_barrier();
        if (s.ok()) s = mem->time_ms(call, &t);
        if (!s.ok()) fail(s);
        ms->push_back(t);
      }
    }
  };
  timed(step, &r->step_ms);  // the whole step
  barrier();
  if (ok) {  // host time per call, every rank enqueuing together
    const Status s = host_us_per_call(mem.get(), step, kHostCalls, &r->host_us);
    if (!s.ok()) fail(s);
  }
  barrier();
  timed([&]() -> Status {  // the shard's decode alone (no exchange)
    MLAKIT_TRY(decode->plan(p, shard_wsv, mem->stream()));
    return decode->run(p, shard_wsv, mem->stream());
  }, &r->shard_ms);
}

Status sharded(const DecodeSpec& spec, int world, int interleave, const Registry& registry, const Preference& pref,
               int64_t iters, CpRow* row) {
  std::vector<ncclComm_t> comms(static_cast<size_t>(world));
  if (ncclCommInitAll(comms.data(), world, nullptr) != ncclSuccess) return Status::cuda_error("ncclCommInitAll failed");
  std::vector<Rank> ranks(static_cast<size_t>(world));
  std::barrier<> sync(world);
  std::atomic<bool> failed{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < world; ++i) {
    ranks[size_t(i)].rank = i;
    threads.emplace_back(run_rank, std::cref(spec), world, interleave, std::cref(registry), std::cref(pref), iters,
                         comms[size_t(i)], std::ref(sync), std::ref(failed), &ranks[size_t(i)]);
  }
  for (std::thread& t : threads) t.join();
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  std::vector<double> step(static_cast<size_t>(iters), 0.0), shard(size_t(iters), 0.0);
  for (const Rank& r : ranks) {  // first every failure: a rank stopped by another's failure has short timings
    if (!r.status.ok()) return Status(r.status.code(), "rank " + std::to_string(r.rank) + ": " + r.status.message());
  }
  for (const Rank& r : ranks) {
    for (size_t i = 0; i < step.size(); ++i) {
      step[i] = std::max(step[i], r.step_ms[i]);
      shard[i] = std::max(shard[i], r.shard_ms[i]);
    }
    row->host_us = std::max(row->host_us, r.host_us);
  }
  row->backend = ranks[0].backend;
  row->step_ms = median(step);
  row->shard_ms = median(shard);
  return {};
}

}  // namespace

int bench_cp(const Args& args, const Registry& registry, const Preference& pref, int64_t iters) {
  // The GPU machines' rule: no NVLink multicast (NVLS) objects, in NCCL or anything it starts.
  setenv("NCCL_NVLS_ENABLE", "0", 1);
  setenv("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", 1);
  setenv("NVSHMEM_DISABLE_NVLS", "1", 1);
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::fprintf(stderr, "--mode cp: needs at least one CUDA device\n");
    return 2;
  }
  int64_t world = devices, interleave = 1;
  std::vector<DecodeSpec> specs = cp_presets();
  Status s = args.get_int("gpus", devices, &world);
  if (s.ok()) s = args.get_int("interleave", 1, &interleave);
  if (s.ok() && (world < 1 || world > devices)) {
    s = Status::invalid("--gpus=" + std::to_string(world) + ": must be in [1, " + std::to_string(devices) +
                        "] (the visible GPUs)");
  }
  if (s.ok()) s = apply_overrides(args, &specs);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 2;
  }
  std::printf("\nmlakit %s, context-parallel decode over %lld GPU(s) (%s), interleave %lld, median of %lld "
              "(caches flushed before each)\n",
              version(), static_cast<long long>(world), nccl_build_info().c_str(), static_cast<long long>(interleave),
              static_cast<long long>(iters));
  std::printf("%-44s %-9s %9s %9s %7s %9s %10s %6s %8s\n", "shape (global)", "backend", "1 GPU ms", "N GPUs ms",
              "speedup", "shard ms", "xchg+merge", "share", "host us");
  std::vector<CpRow> rows;
  int failures = 0;
  for (const DecodeSpec& spec : specs) {
    CpRow row;
    row.spec = spec;
    row.world = int(world);
    row.status = one_gpu(spec, registry, pref, iters, &row);
    if (row.status.ok()) row.status = sharded(spec, int(world), int(interleave), registry, pref, iters, &row);
    if (!row.status.ok()) {
      ++failures;
      std::printf("%-44s FAILED: %s\n", spec.describe().c_str(), row.status.message().c_str());
      continue;
    }
    const double xchg_us = (row.step_ms - row.shard_ms) * 1e3;
    std::printf("%-44s %-9s %9.4f %9.4f %6.2fx %9.4f %8.1fus %5.1f%% %8.1f\n", spec.describe().c_str(),
                row.backend.c_str(), row.one_gpu_ms, row.step_ms, row.one_gpu_ms / row.step_ms, row.shard_ms, xchg_us,
                100.0 * xchg_us * 1e-3 / row.step_ms, row.host_us);
    rows.push_back(row);
  }
  std::printf("N GPUs ms: plan + shard decode + NCCL exchange + merge, the slowest rank of each repetition; shard ms: "
              "plan + shard decode alone\n(slowest rank); xchg+merge = their difference; share = of the step; host us: "
              "CPU time per ContextParallelDecode plan + run call\n(the slowest rank, %d calls enqueued back to back). "
              "Not compared with the reference here (tests/gpu/test_context_parallel.cpp is).\n",
              kHostCalls);
  if (args.has("json")) {
    std::ofstream f(args.get("json", ""));
    f << "[\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const CpRow& r = rows[i];
      f << "  {\"shape\": \"" << r.spec.describe() << "\", \"backend\": \"" << r.backend << "\", \"gpus\": " << r.world
        << ", \"interleave\": " << interleave << ", \"one_gpu_ms\": " << r.one_gpu_ms << ", \"step_ms\": " << r.step_ms
        << ", \"shard_ms\": " << r.shard_ms << ", \"host_us\": " << r.host_us << "}" << (i + 1 < rows.size() ? "," : "")
        << "\n";
    }
    f << "]\n";
  }
  return failures ? 1 : 0;
}

}  // namespace mlakit::cli
