// launch_sequence: plain launches under capture, else a per-thread cache of instantiated graphs replayed with new
// arguments (launch_sequence.h says why).

#include "cuda/common/launch_sequence.h"

#include <cstdint>
#include <string>

#include "cuda/common/check.h"

namespace mlakit::cuda {
namespace {

constexpr int kMaxSequence = 4;  // launches one graph holds; longer sequences launch plainly

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
  cudaGraph_t graph = nullptr;  // kept: the nodes below are its own, which the replay's updates name
  cudaGraphExec_t exec = nullptr;
  cudaGraphNode_t nodes[kMaxSequence] = {};
  uint64_t last_use = 0;

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
    *this = Replay{};
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
    for (Capture& c : captures_) {
      if (c.stream != nullptr) (void)cudaStreamDestroy(c.stream);
    }
  }

  /// The replay of (device, stream, sequence), instantiated on first use.
  Status get(int device, cudaStream_t stream, const KernelLaunch* ls, int n, Replay** out) {
    ++clock_;
    Replay* oldest = &replays_[0];
    for (Replay& r : replays_) {
      if (r.matches(device, stream, ls, n)) {
        r.last_use = clock_;
        *out = &r;
        return {};
      }
      if (r.last_use < oldest->last_use) oldest = &r;
    }
    oldest->release();
    MLAKIT_TRY(instantiate(device, stream, ls, n, oldest));
    oldest->last_use = clock_;
    *out = oldest;
    return {};
  }

 private:
  struct Capture {
    int device = -1;
    cudaStream_t stream = nullptr;
  };

  Status capture_stream(int device, cudaStream_t* out) {
    for (Capture& c : captures_) {
      if (c.device == device) {
        *out = c.stream;
        return {};
      }
    }
    for (Capture& c : captures_) {
      if (c.device < 0) {
        MLAKIT_CUDA_TRY(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
        c.device = device;
        *out = c.stream;
        return {};
      }
    }
    return Status::internal("launch_sequence: more than " + std::to_string(kMaxDevices) + " devices in one thread");
  }

  Status instantiate(int device, cudaStream_t stream, const KernelLaunch* ls, int n, Replay* r) {
    cudaStream_t cs = nullptr;
    MLAKIT_TRY(capture_stream(device, &cs));
    // Thread-local mode: the capture forbids nothing to other threads.
    MLAKIT_CUDA_TRY(cudaStreamBeginCapture(cs, cudaStreamCaptureModeThreadLocal));
    Status launched;
    for (int i = 0; i < n && launched.ok(); ++i) launched = launch_now(ls[i], cs);
    cudaGraph_t graph = nullptr;
    const cudaError_t ended = cudaStreamEndCapture(cs, &graph);
    r->graph = graph;  // released with the entry on any failure below
    r->n = n;
    r->device = device;
    r->stream = stream;
    Status st = launched.ok() ? cuda_status(ended, "cudaStreamEndCapture", __FILE__, __LINE__) : launched;
    if (st.ok()) st = find_nodes(ls, n, r);
    if (st.ok()) st = cuda_status(cudaGraphInstantiate(&r->exec, graph, 0), "cudaGraphInstantiate", __FILE__, __LINE__);
    if (!st.ok()) r->release();
    return st;
  }

  /// Node i of the captured graph is the one that launches ls[i].func.
  static Status find_nodes(const KernelLaunch* ls, int n, Replay* r) {
    cudaGraphNode_t nodes[kMaxSequence] = {};
    size_t count = kMaxSequence;
    MLAKIT_CUDA_TRY(cudaGraphGetNodes(r->graph, nodes, &count));
    if (count != size_t(n)) {
      return Status::internal("launch_sequence: the captured graph has " + std::to_string(count) + " nodes for " +
                              std::to_string(n) + " launches");
    }
    for (int i = 0; i < n; ++i) {
      r->fixed[i] = Fixed{ls[i].func, ls[i].pdl, ls[i].cluster_x};
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

bool distinct_functions(const KernelLaunch* ls, int n) {
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < i; ++j) {
      if (ls[i].func == ls[j].func) return false;
    }
  }
  return true;
}

}  // namespace

Status launch_now(const KernelLaunch& l, cudaStream_t stream) {
  cudaLaunchAttribute attr[2]{};
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = l.grid;
  cfg.blockDim = l.block;
  cfg.dynamicSmemBytes = l.smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  if (l.pdl) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[cfg.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    ++cfg.numAttrs;
  }
  if (l.cluster_x > 1) {
    attr[cfg.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attr[cfg.numAttrs].val.clusterDim.x = l.cluster_x;
    attr[cfg.numAttrs].val.clusterDim.y = 1;
    attr[cfg.numAttrs].val.clusterDim.z = 1;
    ++cfg.numAttrs;
  }
  MLAKIT_CUDA_TRY(cudaLaunchKernelExC(&cfg, l.func, const_cast<void**>(l.args)));
  return {};
}

Status launch_sequence(const KernelLaunch* launches, int n, cudaStream_t stream) {
  if (n <= 0) return {};
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  MLAKIT_CUDA_TRY(cudaStreamIsCapturing(stream, &capture));
  // One kernel launches plainly: replaying a graph of one node measured no cheaper on the host (docs/performance.md).
  if (n == 1 || capture != cudaStreamCaptureStatusNone || n > kMaxSequence || !distinct_functions(launches, n)) {
    for (int i = 0; i < n; ++i) MLAKIT_TRY(launch_now(launches[i], stream));
    return {};
  }
  int device = 0;
  MLAKIT_CUDA_TRY(cudaGetDevice(&device));
  thread_local ReplayCache cache;
  Replay* r = nullptr;
  MLAKIT_TRY(cache.get(device, stream, launches, n, &r));
  for (int i = 0; i < n; ++i) {
    const KernelLaunch& l = launches[i];
    cudaKernelNodeParams kp{};
    kp.func = const_cast<void*>(l.func);
    kp.gridDim = l.grid;
    kp.blockDim = l.block;
    kp.sharedMemBytes = unsigned(l.smem);
    kp.kernelParams = const_cast<void**>(l.args);
    MLAKIT_CUDA_TRY(cudaGraphExecKernelNodeSetParams(r->exec, r->nodes[i], &kp));
  }
  MLAKIT_CUDA_TRY(cudaGraphLaunch(r->exec, stream));
  return {};
}

}  // namespace mlakit::cuda
