// launch_sequence: plain launches under capture, else a per-thread cache of instantiated graphs replayed with new
// arguments (launch_sequence.h says why).

#include "cuda/common/launch_sequence.h"

#include <cstdint>
#include <string>
#include <utility>

#include "cuda/common/check.h"

namespace mlakit::cuda {
namespace {

constexpr int kMaxSequence = 4;  // launches one graph holds; longer sequences launch plainly

Status launch_now(const KernelLaunch& l, cudaStream_t stream) {
  PdlLaunch c(l.grid, l.block, l.smem, stream, l.pdl, l.cluster_x);
  MLAKIT_CUDA_TRY(cudaLaunchKernelExC(&c.cfg, l.func, const_cast<void**>(l.args)));
  return {};
}

Status launch_all_now(const KernelLaunch* ls, int n, cudaStream_t stream) {
  for (int i = 0; i < n; ++i) MLAKIT_TRY(launch_now(ls[i], stream));
  return {};
}

/// What an instantiated graph fixes of a launch: its function and attributes (grid, block, shared memory and
/// arguments are set before each replay).
struct Fixed {
  const void* func = nullptr;
  bool pdl = false;
  unsigned cluster_x = 1;
  bool operator==(const Fixed&) const = default;
};

struct Replay {
  int device = -1;
  cudaStream_t stream = nullptr;
  int n = 0;  // 0: a free entry
  Fixed fixed[kMaxSequence];
  // No graph (exec null) for a sequence whose capture failed: its calls launch plainly, without trying again.
  cudaGraph_t graph = nullptr;  // kept: the nodes below are its own, which the replay's updates name
  cudaGraphExec_t exec = nullptr;
  cudaGraphNode_t nodes[kMaxSequence] = {};
  uint64_t last_use = 0;

  Replay() = default;
  Replay(const Replay&) = delete;
  Replay& operator=(const Replay&) = delete;
  Replay(Replay&& o) noexcept { *this = std::move(o); }
  Replay& operator=(Replay&& o) noexcept {
    if (this != &o) {
      release();
      device = o.device;
      stream = o.stream;
      n = o.n;
      for (int i = 0; i < kMaxSequence; ++i) {
        fixed[i] = o.fixed[i];
        nodes[i] = o.nodes[i];
      }
      graph = std::exchange(o.graph, nullptr);
      exec = std::exchange(o.exec, nullptr);
      last_use = o.last_use;
      o.n = 0;
    }
    return *this;
  }
  ~Replay() { release(); }

  bool matches(int dev, cudaStream_t s, const KernelLaunch* ls, int count) const {
    if (n != count || device != dev || stream != s) return false;
    for (int i = 0; i < n; ++i) {
      if (!(fixed[i] == Fixed{ls[i].func, ls[i].pdl, ls[i].cluster_x})) return false;
    }
    return true;
  }
  // Errors are not reported: this runs when an entry is replaced or the thread ends (at process exit the runtime may be
  // gone). An executable graph still running when destroyed is freed when it completes.
  void release() {
    if (exec != nullptr) (void)cudaGraphExecDestroy(exec);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    exec = nullptr;
    graph = nullptr;
    n = 0;
    last_use = 0;
  }
};

/// One host thread's graphs, and per device the stream it captures them on (its own, so that the caller's stream is
/// never put into capture mode, and the legacy default stream, which cannot be captured, works too).
class ReplayCache {
 public:
  ReplayCache() = default;
  ReplayCache(const ReplayCache&) = delete;
  ReplayCache& operator=(const ReplayCache&) = delete;
  ~ReplayCache() {
    for (Replay& r : replays_) r.release();
    for (Capture& c : captures_) forget(c);
  }

  /// The entry of (device, stream, sequence): found, or made in place of the least recently used one once its capture
  /// has been tried (an entry without a graph when that failed).
  Replay* get(int device, cudaStream_t stream, const KernelLaunch* ls, int n) {
    ++clock_;
    Replay* oldest = &replays_[0];
    for (Replay& r : replays_) {
      if (r.matches(device, stream, ls, n)) {
        r.last_use = clock_;
        return &r;
      }
      if (r.last_use < oldest->last_use) oldest = &r;
    }
    Replay fresh;
    fresh.device = device;
    fresh.stream = stream;
    fresh.n = n;
    for (int i = 0; i < n; ++i) fresh.fixed[i] = Fixed{ls[i].func, ls[i].pdl, ls[i].cluster_x};
    if (!instantiate(device, ls, n, &fresh).ok()) {
      // The failed call's error (of the capture stream's creation too), so that this thread's next launch check (of
      // any kernel) does not report it as its own: the call goes on with plain launches.
      (void)cudaGetLastError();
      fresh.release();  // no graph: the entry says "launch plainly"
      fresh.device = device;
      fresh.stream = stream;
      fresh.n = n;
    }
    fresh.last_use = clock_;
    *oldest = std::move(fresh);
    return oldest;
  }

  /// Drops the device's capture stream (a graph that failed may have failed with it): the next capture makes a new one.
  void drop_capture_stream(int device) {
    for (Capture& c : captures_) {
      if (c.device == device) forget(c);
    }
  }

  int kept() const {
    int k = 0;
    for (const Replay& r : replays_) k += r.exec != nullptr;
    return k;
  }

 private:
  struct Capture {
    int device = -1;
    cudaStream_t stream = nullptr;
  };

  static void forget(Capture& c) {
    if (c.stream != nullptr) (void)cudaStreamDestroy(c.stream);
    c = Capture{};
  }

  Status capture_stream(int device, Capture** out) {
    Capture* free_entry = nullptr;
    for (Capture& c : captures_) {
      if (c.device == device) {
        *out = &c;
        return {};
      }
      if (c.device < 0 && free_entry == nullptr) free_entry = &c;
    }
    if (free_entry == nullptr) {
      return Status::internal("launch_sequence: more than " + std::to_string(kMaxDevices) + " devices in one thread");
    }
    MLAKIT_CUDA_TRY(cudaStreamCreateWithFlags(&free_entry->stream, cudaStreamNonBlocking));
    free_entry->device = device;
    *out = free_entry;
    return {};
  }

  /// Captures the sequence on the device's own stream (running nothing) and instantiates it into `r`. On failure the
  /// capture stream is dropped too (a reset context leaves it dangling; the next capture makes a new one).
  Status instantiate(int device, const KernelLaunch* ls, int n, Replay* r) {
    Capture* cap = nullptr;
    MLAKIT_TRY(capture_stream(device, &cap));
    // Thread-local mode: the capture forbids nothing to other threads.
    Status st = cuda_status(cudaStreamBeginCapture(cap->stream, cudaStreamCaptureModeThreadLocal),
                            "cudaStreamBeginCapture", __FILE__, __LINE__);
    if (st.ok()) {
      for (int i = 0; i < n && st.ok(); ++i) st = launch_now(ls[i], cap->stream);
      cudaGraph_t graph = nullptr;
      const cudaError_t ended = cudaStreamEndCapture(cap->stream, &graph);  // ends the capture whatever happened
      r->graph = graph;
      if (st.ok()) st = cuda_status(ended, "cudaStreamEndCapture", __FILE__, __LINE__);
    }
    if (st.ok()) st = find_nodes(ls, n, r);
    if (st.ok()) st = cuda_status(cudaGraphInstantiate(&r->exec, r->graph, 0), "cudaGraphInstantiate", __FILE__, __LINE__);
    if (!st.ok()) {
      r->release();
      forget(*cap);
    }
    return st;
  }

  /// Node i of the captured graph is the one that launches ls[i].func; the graph must hold exactly the n launches.
  static Status find_nodes(const KernelLaunch* ls, int n, Replay* r) {
    size_t count = 0;
    MLAKIT_CUDA_TRY(cudaGraphGetNodes(r->graph, nullptr, &count));
    if (count != size_t(n)) {
      return Status::internal("launch_sequence: the captured graph has " + std::to_string(count) + " nodes for " +
                              std::to_string(n) + " launches");
    }
    cudaGraphNode_t nodes[kMaxSequence] = {};
    MLAKIT_CUDA_TRY(cudaGraphGetNodes(r->graph, nodes, &count));
    for (int i = 0; i < n; ++i) {
      r->nodes[i] = nullptr;
      for (size_t j = 0; j < count; ++j) {
        cudaKernelNodeParams kp{};
        MLAKIT_CUDA_TRY(cudaGraphKernelNodeGetParams(nodes[j], &kp));
        if (kp.func == ls[i].func) r->nodes[i] = nodes[j];
      }
      if (r->nodes[i] == nullptr) return Status::internal("launch_sequence: a captured launch has no graph node");
    }
    return {};
  }

  static constexpr int kMaxDevices = 64;
  Replay replays_[kMaxReplays];
  Capture captures_[kMaxDevices];
  uint64_t clock_ = 0;
};

ReplayCache& this_threads_cache() {
  thread_local ReplayCache cache;
  return cache;
}

bool distinct_functions(const KernelLaunch* ls, int n) {
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < i; ++j) {
      if (ls[i].func == ls[j].func) return false;
    }
  }
  return true;
}

}  // namespace

int replays_kept_by_this_thread() { return this_threads_cache().kept(); }

Status launch_sequence(const KernelLaunch* launches, int n, cudaStream_t stream) {
  if (n <= 0) return {};
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  MLAKIT_CUDA_TRY(cudaStreamIsCapturing(stream, &capture));
  // One kernel launches plainly: replaying a graph of one node measured no cheaper on the host (docs/performance.md).
  if (n == 1 || capture != cudaStreamCaptureStatusNone || n > kMaxSequence || !distinct_functions(launches, n)) {
    return launch_all_now(launches, n, stream);
  }
  int device = 0;
  MLAKIT_CUDA_TRY(cudaGetDevice(&device));
  Replay* r = this_threads_cache().get(device, stream, launches, n);
  if (r->exec == nullptr) return launch_all_now(launches, n, stream);  // its capture failed once: plain launches
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < n && err == cudaSuccess; ++i) {
    const KernelLaunch& l = launches[i];
    cudaKernelNodeParams kp{};
    kp.func = const_cast<void*>(l.func);
    kp.gridDim = l.grid;
    kp.blockDim = l.block;
    kp.sharedMemBytes = unsigned(l.smem);
    kp.kernelParams = const_cast<void**>(l.args);
    err = cudaGraphExecKernelNodeSetParams(r->exec, r->nodes[i], &kp);
  }
  if (err == cudaSuccess) {
    err = cudaGraphLaunch(r->exec, stream);
    if (err == cudaSuccess) return {};
  }
  // A graph that failed is dropped, with the device's capture stream, so that the next call captures a new graph on a
  // new stream; this call launches plainly (a sticky error from an earlier kernel fails those launches too, and is
  // reported).
  r->release();
  this_threads_cache().drop_capture_stream(device);
  (void)cudaGetLastError();  // the failed graph call's error, not this call's launches', if those succeed
  return launch_all_now(launches, n, stream);
}

}  // namespace mlakit::cuda
