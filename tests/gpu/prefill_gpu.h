#pragma once
// A PrefillCase on a CUDA backend, for the GPU prefill tests and the differential fuzzer: k and v NaN-poisoned past
// the last key, outputs poisoned before the call, and the comparison with the CPU reference under docs/spec.md
// section 10's tolerances. Header-only like test_cache_util.h, so each test executable stays self-contained.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/compare.h"
#include "common/decode_case.h"
#include "common/prefill_case.h"
#include "mlakit/backend.h"
#include "reference/ops.h"
#include "test_cache_util.h"

namespace mlakit::test {

/// The (d_qk, d_v) pairs the portable path is compiled for; the Hopper path has the first two.
inline constexpr Geometry kPrefillGeometries[] = {{192, 128}, {128, 128}, {64, 64}};
inline constexpr int64_t kPoisonTokens = 64;  // NaN tokens after the last key of k and v on the device

/// Uploads `bits` followed by kPoisonTokens tokens of NaN (the kernel must not read past the last key).
inline void upload_poisoned(DeviceBuffer* buf, const std::vector<uint16_t>& bits, int64_t token_stride) {
  std::vector<uint16_t> padded = bits;
  padded.insert(padded.end(), size_t(kPoisonTokens * token_stride), kPoison16);
  DeviceBuffer::upload(buf, padded);
}

/// Whether CUDA backend `backend` is built without the (d_qk, d_v) pair of `g`: it must refuse such a call by name.
inline bool path_lacks(const std::string& backend, const Geometry& g) {
  return backend == "cuda_sm90" && g.d_vh != 128;
}

/// Whether `st` is a refusal by one of the CUDA prefill paths' documented rules: a (d_qk, d_v) the path is not built
/// for, or (the portable path on devices with 99 KB of shared memory per block) one whose kernel does not fit there.
inline bool refused_by_rule(const Status& st) {
  const std::string& m = st.message();
  const auto has = [&](const char* text) { return m.find(text) != std::string::npos; };
  return st.code() == StatusCode::kNotSupported && has("(d_qk, d_v)=") &&
         (has("is compiled for") || has("bytes of shared memory per block"));
}

/// A host tensor's copy on the GPU (contiguous views only), and the way back for outputs.
struct OnDevice {
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  TensorView put(const TensorView& host) {
    buffers.push_back(std::make_unique<DeviceBuffer>());
    const size_t bytes = size_t(host.numel()) * dtype_size(host.dtype);
    DeviceBuffer& b = *buffers.back();
    b.allocate(bytes);
    if (bytes > 0) cudaMemcpy(b.get(), host.data, bytes, cudaMemcpyHostToDevice);
    return view_of(host, b);
  }
  /// `host`'s view (shape, strides, dtype) over device buffer `b` on device 0.
  static TensorView view_of(TensorView host, const DeviceBuffer& b) {
    host.data = b.get();
    host.device = Device::cuda(0);
    return host;
  }
  static void get(const TensorView& host, const TensorView& dev) {
    const size_t bytes = size_t(host.numel()) * dtype_size(host.dtype);
    if (bytes > 0) cudaMemcpy(host.data, dev.data, bytes, cudaMemcpyDeviceToHost);
  }
};

/// cu_seqlens for the device other than the case's: contents that validation, which cannot read device memory, does
/// not see (a null member: the case's own).
struct DeviceLens {
  const std::vector<int32_t>* cu_q = nullptr;
  const std::vector<int32_t>* cu_k = nullptr;
};

/// Runs case `c` on CUDA backend `be` (device 0): k and v NaN-poisoned past the last key, out and lse poisoned before
/// the call, cu_seqlens as `lens` replaces them. Returns the call's status (a refusal runs nothing); on success *out
/// and *lse hold what the device wrote, as floats.
inline Status run_prefill_on_gpu(const Backend& be, PrefillCase& c, std::vector<float>* out, std::vector<float>* lse,
                                 DeviceLens lens = {}) {
  const PrefillCaseConfig& cfg = c.cfg;
  const PrefillProblem host = c.problem();
  DeviceBuffer dq, dk, dv, dcq, dck, dout, dlse;
  DeviceBuffer::upload(&dq, c.q);
  upload_poisoned(&dk, c.k, c.token_stride(cfg.geometry.d_qk));
  upload_poisoned(&dv, c.v, c.token_stride(cfg.geometry.d_vh));
  DeviceBuffer::upload(&dcq, lens.cu_q != nullptr ? *lens.cu_q : c.cu_q);
  DeviceBuffer::upload(&dck, lens.cu_k != nullptr ? *lens.cu_k : c.cu_k);
  DeviceBuffer::upload(&dout, std::vector<uint16_t>(c.out.size(), kPoison16));
  DeviceBuffer::upload(&dlse, std::vector<float>(c.lse.size(), NAN));
  PrefillProblem p = host;
  p.q = OnDevice::view_of(host.q, dq);
  p.k = OnDevice::view_of(host.k, dk);
  p.v = OnDevice::view_of(host.v, dv);
  p.cu_seqlens_q = OnDevice::view_of(host.cu_seqlens_q, dcq);
  p.cu_seqlens_k = OnDevice::view_of(host.cu_seqlens_k, dck);
  p.out = OnDevice::view_of(host.out, dout);
  p.lse = OnDevice::view_of(host.lse, dlse);
  MLAKIT_TRY(be.run(p, Stream{}));
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return Status::cuda_error(std::string("prefill: ") + cudaGetErrorString(e));
  }
  *out = to_floats(dout.download<uint16_t>(c.out.size()), cfg.dtype);
  *lse = dlse.download<float>(c.lse.size());
  return {};
}

/// The largest |value| of v: at least each row's vmax, so the bound built on it is never tighter than SPEC's.
inline float v_max(const PrefillCase& c) {
  float vmax = 0.0f;
  for (float x : to_floats(c.v, c.cfg.dtype)) {
    if (std::isfinite(x)) vmax = std::max(vmax, std::fabs(x));
  }
  return vmax;
}

/// Runs the reference on c's host buffers and compares `out` (every element) and `lse` from the device with it.
inline void expect_prefill_matches_reference(PrefillCase& c, const std::vector<float>& out,
                                             const std::vector<float>& lse) {
  const Status ref = reference::prefill(c.problem());
  ASSERT_TRUE(ref.ok()) << ref.to_string();
  const std::vector<float> row_vmax{v_max(c)};
  EXPECT_TRUE(check_out(out, to_floats(c.out, c.cfg.dtype), row_vmax, c.cfg.geometry.d_vh, c.cfg.dtype));
  EXPECT_TRUE(check_lse(lse, c.lse));
}

}  // namespace mlakit::test
