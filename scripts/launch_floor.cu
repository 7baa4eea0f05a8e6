// The host cost of each CUDA call a decode call makes, on the GPU machine's CPU (docs/performance.md, "Three combine
// changes measured and kept off main": the figures of 2026-11-28 came from this program), whether a cooperative
// launch takes PDL, clusters and graph capture, and what replaying a captured two-kernel call costs, with its
// pointers unchanged or set anew before each replay. Build and run
// on the GPU machine, pinned as the bench's host figures are:
//   nvcc -std=c++17 -O2 -arch=sm_90a scripts/launch_floor.cu -lcuda -o /tmp/launch_floor
//   taskset -c 2-5 /tmp/launch_floor
// Nothing here is part of the library or its tests.

#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>
namespace cg = cooperative_groups;

__global__ void empty_kernel() {}
__global__ void __launch_bounds__(384, 1) big_kernel(int* p) {
  extern __shared__ char s[];
  if (p && threadIdx.x == 0) p[blockIdx.x] = s[0];
}
__global__ void __launch_bounds__(384, 1) sync_kernel(int n, int* p) {
  extern __shared__ char s[];
  cg::grid_group g = cg::this_grid();
  for (int i = 0; i < n; ++i) g.sync();
  if (p && threadIdx.x == 0) p[blockIdx.x] = s[0] + n;
}
#define CK(x)                                             \
  do {                                                    \
    cudaError_t e_ = (x);                                 \
    if (e_ != cudaSuccess) {                              \
      printf("ERR %s: %s\n", #x, cudaGetErrorString(e_)); \
    }                                                     \
  } while (0)

static double host_us(const std::function<void()>& f, cudaStream_t st, int calls = 200) {
  std::vector<double> b;
  for (int k = 0; k < 7; ++k) {
    cudaStreamSynchronize(st);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) f();
    auto t1 = std::chrono::steady_clock::now();
    b.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / calls);
    cudaStreamSynchronize(st);
  }
  std::sort(b.begin(), b.end());
  return b[b.size() / 2];
}

int main() {
  cudaFree(0);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaStream_t st;
  cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking);
  const int smem = 200 * 1024;
  CK(cudaFuncSetAttribute(big_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  CK(cudaFuncSetAttribute(sync_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int* buf;
  cudaMalloc(&buf, 4096 * 4);
  cudaLaunchAttribute attr[2]{};
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeCooperative;
  attr[1].val.cooperative = 1;
  auto cfg_of = [&](dim3 g, dim3 b, int sm, int na, cudaLaunchAttribute* a) {
    return cudaLaunchConfig_t{g, b, size_t(sm), st, a, unsigned(na)};  // grid, block, smem, stream, attributes
  };
  cudaLaunchConfig_t c_empty = cfg_of(dim3(1), dim3(32), 0, 1, attr);
  cudaLaunchConfig_t c_big = cfg_of(dim3(sms), dim3(384), smem, 1, attr);
  cudaLaunchConfig_t c_coop_pdl = cfg_of(dim3(sms), dim3(384), smem, 2, attr);
  cudaLaunchConfig_t c_coop = cfg_of(dim3(sms), dim3(384), smem, 1, attr + 1);
  int* nul = nullptr;
  int zero = 0;
  CK(cudaLaunchKernelEx(&c_empty, empty_kernel));
  CK(cudaLaunchKernelEx(&c_big, big_kernel, nul));
  CK(cudaLaunchKernelEx(&c_coop_pdl, sync_kernel, 1, buf));
  CK(cudaLaunchKernelEx(&c_coop, sync_kernel, 1, buf));
  CK(cudaStreamSynchronize(st));
  printf("sms %d\n", sms);
  printf("host_us empty_pdl        %.2f\n", host_us([&] { cudaLaunchKernelEx(&c_empty, empty_kernel); }, st));
  printf("host_us big_pdl          %.2f\n", host_us([&] { cudaLaunchKernelEx(&c_big, big_kernel, nul); }, st));
  printf("host_us big_coop_pdl     %.2f\n",
         host_us([&] { cudaLaunchKernelEx(&c_coop_pdl, sync_kernel, zero, nul); }, st));
  printf("host_us big_coop         %.2f\n", host_us([&] { cudaLaunchKernelEx(&c_coop, sync_kernel, zero, nul); }, st));
  printf("host_us two_big_pdl      %.2f\n", host_us(
                                                [&] {
                                                  cudaLaunchKernelEx(&c_big, big_kernel, nul);
                                                  cudaLaunchKernelEx(&c_big, big_kernel, nul);
                                                },
                                                st));
  printf(
      "host_us funcsetattr      %.2f\n",
      host_us([&] { cudaFuncSetAttribute(big_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem); }, st, 2000));
  printf("host_us getdevice        %.3f\n", host_us(
                                                [&] {
                                                  int d;
                                                  cudaGetDevice(&d);
                                                },
                                                st, 20000));
  printf("host_us capinfo          %.3f\n", host_us(
                                                [&] {
                                                  cudaStreamCaptureStatus s;
                                                  cudaStreamIsCapturing(st, &s);
                                                },
                                                st, 20000));
  // cuTensorMapEncodeTiled of a bf16 page cache view (as the Hopper decode encodes one per call)
  {
    void* pages;
    size_t bytes = size_t(1024) * 64 * 576 * 2;
    cudaMalloc(&pages, bytes);
    CUtensorMap m;
    cuuint64_t dims[3] = {576, 64, 1024};
    cuuint64_t strides[2] = {576 * 2, 64 * 576 * 2};
    cuuint32_t box[3] = {64, 16, 1};
    cuuint32_t es[3] = {1, 1, 1};
    CUresult r = cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, pages, dims, strides, box, es,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    printf("tensormap encode rc %d\n", int(r));
    printf("host_us tmap_encode      %.3f\n",
           host_us(
               [&] {
                 cuTensorMapEncodeTiled(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, pages, dims, strides, box, es,
                                        CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
               },
               st, 20000));
  }
  // GPU time of one grid.sync across sms CTAs of 384 threads
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int n : {0, 1, 100, 1000}) {
    float ms = 0;
    std::vector<float> v;
    for (int k = 0; k < 5; ++k) {
      cudaEventRecord(a, st);
      CK(cudaLaunchKernelEx(&c_coop, sync_kernel, n, buf));
      cudaEventRecord(b, st);
      cudaEventSynchronize(b);
      cudaEventElapsedTime(&ms, a, b);
      v.push_back(ms);
    }
    std::sort(v.begin(), v.end());
    printf("gpu sync_kernel n=%d: %.2f us\n", n, v[2] * 1000);
  }
  // graph capture of cooperative + PDL launches
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  CK(cudaLaunchKernelEx(&c_coop_pdl, sync_kernel, 3, buf));
  CK(cudaLaunchKernelEx(&c_coop_pdl, sync_kernel, 3, buf));
  CK(cudaStreamEndCapture(st, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, st));
  CK(cudaStreamSynchronize(st));
  int h[4];
  cudaMemcpy(h, buf, 16, cudaMemcpyDeviceToHost);
  printf("graph coop+pdl replay ok, buf[0]=%d (expect 3)\n", h[0]);
  // a cooperative grid too large must be refused, not hang
  cudaLaunchConfig_t c_too = cfg_of(dim3(sms + 1), dim3(384), smem, 1, attr + 1);
  cudaError_t e = cudaLaunchKernelEx(&c_too, sync_kernel, 1, buf);
  printf("too large coop launch: %s\n", cudaGetErrorString(e));
  cudaGetLastError();
  // cluster of 2 with cooperative
  cudaLaunchAttribute attr3[3] = {attr[0], attr[1]};
  attr3[2].id = cudaLaunchAttributeClusterDimension;
  attr3[2].val.clusterDim.x = 2;
  attr3[2].val.clusterDim.y = 1;
  attr3[2].val.clusterDim.z = 1;
  cudaLaunchConfig_t c_cl = cfg_of(dim3(sms), dim3(384), smem, 3, attr3);
  e = cudaLaunchKernelEx(&c_cl, sync_kernel, 2, buf);
  printf("coop+pdl+cluster2 launch: %s\n", cudaGetErrorString(e));
  e = cudaStreamSynchronize(st);
  printf("coop+pdl+cluster2 sync: %s\n", cudaGetErrorString(e));
  printf("host_us coop_pdl_cluster2 %.2f\n", host_us([&] { cudaLaunchKernelEx(&c_cl, sync_kernel, zero, nul); }, st));
  // A decode call's two launches (decode kernel, then combine with PDL) captured once and replayed: the host cost of
  // one cudaGraphLaunch against two cudaLaunchKernelEx (a prepared call could replay its own graph while its
  // pointers stay the same).
  {
    cudaGraph_t g2;
    cudaGraphExec_t e2;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    CK(cudaLaunchKernelEx(&c_big, big_kernel, nul));
    CK(cudaLaunchKernelEx(&c_empty, empty_kernel));
    CK(cudaStreamEndCapture(st, &g2));
    CK(cudaGraphInstantiate(&e2, g2, 0));
    CK(cudaGraphLaunch(e2, st));
    CK(cudaStreamSynchronize(st));
    printf("host_us graph_two_kernels %.2f\n", host_us([&] { cudaGraphLaunch(e2, st); }, st));
    printf("host_us direct_two_kernels %.2f\n", host_us(
                                                    [&] {
                                                      cudaLaunchKernelEx(&c_big, big_kernel, nul);
                                                      cudaLaunchKernelEx(&c_empty, empty_kernel);
                                                    },
                                                    st));
    // The same replay when every call has new pointers (a layer's own cache, q and out, as an engine's calls have):
    // each kernel node set again in the instantiated graph (cudaGraphExecKernelNodeSetParams: the big kernel with a
    // new pointer argument, the empty one, which has none, unchanged), then the launch. The real call's arguments are
    // larger (DecodeParams and a 128-byte tensor map), which this does not time.
    // Whether this stays under the two direct launches decides whether a prepared call could keep a graph per shape.
    size_t n_nodes = 0;
    CK(cudaGraphGetNodes(g2, nullptr, &n_nodes));
    std::vector<cudaGraphNode_t> nodes(n_nodes);
    CK(cudaGraphGetNodes(g2, nodes.data(), &n_nodes));
    std::vector<cudaGraphNode_t> kernels;
    std::vector<cudaKernelNodeParams> params;
    for (cudaGraphNode_t n : nodes) {
      cudaGraphNodeType type;
      CK(cudaGraphNodeGetType(n, &type));
      if (type != cudaGraphNodeTypeKernel) continue;
      cudaKernelNodeParams kp;
      CK(cudaGraphKernelNodeGetParams(n, &kp));
      kernels.push_back(n);
      params.push_back(kp);
    }
    printf("graph kernel nodes: %zu of %zu nodes\n", kernels.size(), n_nodes);
    int* targets[2] = {buf, buf + 2048};  // alternated: the big kernel writes p[blockIdx.x] (sms < 2048 entries)
    int flip = 0;
    void* big_args[2][1] = {{&targets[0]}, {&targets[1]}};
    void* no_args[1] = {nullptr};
    const auto set_and_launch = [&] {
      flip ^= 1;
      for (size_t i = 0; i < kernels.size(); ++i) {
        cudaKernelNodeParams kp = params[i];
        kp.kernelParams = kp.func == reinterpret_cast<void*>(big_kernel) ? big_args[flip] : no_args;
        CK(cudaGraphExecKernelNodeSetParams(e2, kernels[i], &kp));
      }
      CK(cudaGraphLaunch(e2, st));
    };
    set_and_launch();
    CK(cudaStreamSynchronize(st));
    printf("host_us graph_two_kernels_new_pointers %.2f\n", host_us(set_and_launch, st));
    cudaGraphExecDestroy(e2);
    cudaGraphDestroy(g2);
  }
  return 0;
}
