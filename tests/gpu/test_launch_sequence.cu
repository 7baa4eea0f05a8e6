// launch_sequence (src/cuda/common/launch_sequence.h): an eager sequence replays one instantiated graph per (thread,
// device, stream, functions), so every replay must carry that call's grids and arguments, on any stream, including the
// legacy default one, with its launch attributes (clusters); a stream under capture gets plain launches, which join
// the caller's graph; more sequences than a thread keeps replace old ones, while earlier replays are still queued, and
// still run right.

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "cuda/common/launch_sequence.h"
#include "test_cache_util.h"

namespace mlakit::test {
namespace {

// out[i] = in[i] + add + K: one function per K, so that sequences can differ in their first kernel.
template <int K>
__global__ void add_kernel(const int* in, int* out, int n, int add) {
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = in[i] + add + K;
}

// out[i] *= mul, after the kernel before it (launched with PDL: waits for it first).
__global__ void scale_kernel(int* out, int n, int mul) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  const int i = int(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] *= mul;
}

struct Args {
  const int* in;
  int* out;
  int n;
  int add;
  int mul;
};

/// Runs (add_kernel<K>, scale_kernel) over `a` on `stream` as one sequence; the grids follow n (the first one's x even
/// when it launches in clusters of `cluster_x`).
template <int K>
Status run_pair(Args& a, cudaStream_t stream, unsigned cluster_x = 1) {
  cuda::KernelLaunch l[2];
  const unsigned blocks = unsigned((a.n + 127) / 128);
  l[0].grid = dim3((blocks + cluster_x - 1) / cluster_x * cluster_x);
  l[0].block = dim3(128);
  l[0].cluster_x = cluster_x;
  cuda::set_kernel(l[0], add_kernel<K>, &a.in, &a.out, &a.n, &a.add);
  l[1].grid = dim3(unsigned((a.n + 63) / 64));
  l[1].block = dim3(64);
  l[1].pdl = true;
  cuda::set_kernel(l[1], scale_kernel, &a.out, &a.n, &a.mul);
  return cuda::launch_sequence(l, 2, stream);
}

std::vector<int> iota(int n, int from) {
  std::vector<int> v(size_t(n), 0);
  for (int i = 0; i < n; ++i) v[size_t(i)] = from + i;
  return v;
}

/// Checks out[0, n) = (in[i] + add + K) * mul and that out[n, size) still holds the poison.
void expect_pair(const DeviceBuffer& out, const std::vector<int>& in, const Args& a, int k, int size, int poison) {
  const std::vector<int> got = out.download<int>(size_t(size));
  int wrong = 0, first = -1;
  for (int i = 0; i < size; ++i) {
    const int want = i < a.n ? (in[size_t(i)] + a.add + k) * a.mul : poison;
    if (got[size_t(i)] != want && first < 0) first = i;
    wrong += got[size_t(i)] != want;
  }
  EXPECT_EQ(wrong, 0) << "n=" << a.n << " add=" << a.add << " mul=" << a.mul << " k=" << k << "; first wrong: out["
                      << first << "] = " << (first < 0 ? 0 : got[size_t(first)]);
}

class LaunchSequence : public ::testing::Test {
 protected:
  void SetUp() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) GTEST_SKIP() << "no CUDA device";
  }
};

TEST_F(LaunchSequence, EachReplayCarriesItsCallsGridsAndArguments) {
  constexpr int kSize = 5000;
  const std::vector<int> in0 = iota(kSize, 0), in1 = iota(kSize, 100000);
  DeviceBuffer d_in0, d_in1, d_out0, d_out1;
  DeviceBuffer::upload(&d_in0, in0);
  DeviceBuffer::upload(&d_in1, in1);
  cudaStream_t stream = nullptr;
  CACHE_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int call = 0; call < 40; ++call) {
    const bool second = call % 2 == 1;  // the buffers alternate, the sizes (and so the grids) change every call
    const int poison = -7 - call;
    DeviceBuffer& out = second ? d_out1 : d_out0;
    DeviceBuffer::upload(&out, std::vector<int>(kSize, poison));
    Args a{static_cast<const int*>((second ? d_in1 : d_in0).get()), static_cast<int*>(out.get()),
           1 + (call * 977) % kSize, call, 1 + call % 5};
    ASSERT_TRUE(run_pair<0>(a, stream).ok());
    CACHE_TEST_CUDA(cudaStreamSynchronize(stream));
    expect_pair(out, second ? in1 : in0, a, 0, kSize, poison);
  }
  EXPECT_GT(cuda::replays_kept_by_this_thread(), 0);  // the calls above were replays, not plain launches
  CACHE_TEST_CUDA(cudaStreamDestroy(stream));
}

TEST_F(LaunchSequence, ClustersOfTwoKeepTheirAttributeInTheReplay) {
  int device = 0, major = 0;
  CACHE_TEST_CUDA(cudaGetDevice(&device));
  CACHE_TEST_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  if (major < 9) GTEST_SKIP() << "thread-block clusters need sm_90";
  constexpr int kSize = 4000;
  const std::vector<int> in = iota(kSize, 3);
  DeviceBuffer d_in, d_out;
  DeviceBuffer::upload(&d_in, in);
  DeviceBuffer::upload(&d_out, std::vector<int>(kSize, -5));
  cudaStream_t stream = nullptr;
  CACHE_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int call = 0; call < 6; ++call) {
    d_out.copy_from(std::vector<int>(kSize, -5));
    Args a{static_cast<const int*>(d_in.get()), static_cast<int*>(d_out.get()), kSize - 333 * call, call, 3};
    ASSERT_TRUE(run_pair<1>(a, stream, 2).ok());
    CACHE_TEST_CUDA(cudaStreamSynchronize(stream));
    expect_pair(d_out, in, a, 1, kSize, -5);
  }
  CACHE_TEST_CUDA(cudaStreamDestroy(stream));
}

TEST_F(LaunchSequence, RunsOnSeveralStreamsAndTheLegacyDefaultStream) {
  constexpr int kSize = 3000;
  const std::vector<int> in = iota(kSize, 5);
  DeviceBuffer d_in;
  DeviceBuffer::upload(&d_in, in);
  cudaStream_t streams[3] = {nullptr, nullptr, nullptr};  // [2]: the legacy default stream
  CACHE_TEST_CUDA(cudaStreamCreateWithFlags(&streams[0], cudaStreamNonBlocking));
  CACHE_TEST_CUDA(cudaStreamCreateWithFlags(&streams[1], cudaStreamNonBlocking));
  DeviceBuffer outs[3];
  for (int round = 0; round < 4; ++round) {
    Args args[3];
    for (int s = 0; s < 3; ++s) {
      DeviceBuffer::upload(&outs[s], std::vector<int>(kSize, -1));
      args[s] = Args{static_cast<const int*>(d_in.get()), static_cast<int*>(outs[s].get()), kSize - 700 * s - round,
                     10 * s + round, 2 + s};
      ASSERT_TRUE(run_pair<0>(args[s], streams[s]).ok());
    }
    CACHE_TEST_CUDA(cudaDeviceSynchronize());
    for (int s = 0; s < 3; ++s) expect_pair(outs[s], in, args[s], 0, kSize, -1);
  }
  CACHE_TEST_CUDA(cudaStreamDestroy(streams[0]));
  CACHE_TEST_CUDA(cudaStreamDestroy(streams[1]));
}

TEST_F(LaunchSequence, UnderCaptureTheKernelsJoinTheCallersGraph) {
  constexpr int kSize = 2000;
  const std::vector<int> in = iota(kSize, -50);
  DeviceBuffer d_in, d_out;
  DeviceBuffer::upload(&d_in, in);
  DeviceBuffer::upload(&d_out, std::vector<int>(kSize, -3));
  cudaStream_t stream = nullptr;
  CACHE_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Args a{static_cast<const int*>(d_in.get()), static_cast<int*>(d_out.get()), kSize - 1, 3, 7};
  const int kept = cuda::replays_kept_by_this_thread();
  CACHE_TEST_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const Status st = run_pair<0>(a, stream);
  EXPECT_EQ(cuda::replays_kept_by_this_thread(), kept);  // plain launches: no graph of its own
  cudaGraph_t graph = nullptr;
  CACHE_TEST_CUDA(cudaStreamEndCapture(stream, &graph));
  ASSERT_TRUE(st.ok()) << st.message();
  size_t nodes = 0;
  CACHE_TEST_CUDA(cudaGraphGetNodes(graph, nullptr, &nodes));
  EXPECT_EQ(nodes, 2u);  // the two kernels themselves, not a child graph
  cudaGraphExec_t exec = nullptr;
  CACHE_TEST_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CACHE_TEST_CUDA(cudaGraphLaunch(exec, stream));
  CACHE_TEST_CUDA(cudaStreamSynchronize(stream));
  expect_pair(d_out, in, a, 0, kSize, -3);
  CACHE_TEST_CUDA(cudaGraphExecDestroy(exec));
  CACHE_TEST_CUDA(cudaGraphDestroy(graph));
  CACHE_TEST_CUDA(cudaStreamDestroy(stream));
}

/// Enqueues (add_kernel<K>, scale_kernel) for every K back to back, each into its own buffer, with no synchronisation
/// between them: graphs are replaced while earlier replays of them are still queued or running.
template <int... K>
void run_each_queued(const DeviceBuffer& d_in, const std::vector<int>& in, int size, int round, cudaStream_t stream,
                     std::integer_sequence<int, K...>) {
  constexpr int kCount = int(sizeof...(K));
  DeviceBuffer outs[kCount];
  Args args[kCount];
  int i = 0;
  const auto one = [&](auto k_const) {
    constexpr int k = decltype(k_const)::value;
    DeviceBuffer::upload(&outs[i], std::vector<int>(size_t(size), -9));
    args[i] = Args{static_cast<const int*>(d_in.get()), static_cast<int*>(outs[i].get()), size - 11 * round - i, 2 * k,
                   3 + round};
    EXPECT_TRUE(run_pair<k>(args[i], stream).ok()) << "k=" << k;
    ++i;
  };
  (one(std::integral_constant<int, K>{}), ...);
  CACHE_TEST_CUDA(cudaStreamSynchronize(stream));
  i = 0;
  ((expect_pair(outs[i], in, args[i], K, size, -9), ++i), ...);
}

TEST_F(LaunchSequence, MoreSequencesThanAThreadKeepsStillRunRight) {
  static_assert(cuda::kMaxReplays < 20);
  constexpr int kSize = 1000;
  const std::vector<int> in = iota(kSize, 1);
  DeviceBuffer d_in;
  DeviceBuffer::upload(&d_in, in);
  cudaStream_t stream = nullptr;
  CACHE_TEST_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  for (int round = 0; round < 2; ++round) {  // the second round finds every graph of the first replaced
    run_each_queued(d_in, in, kSize, round, stream, std::make_integer_sequence<int, 20>{});
  }
  EXPECT_EQ(cuda::replays_kept_by_this_thread(), cuda::kMaxReplays);
  CACHE_TEST_CUDA(cudaStreamDestroy(stream));
}

}  // namespace
}  // namespace mlakit::test
