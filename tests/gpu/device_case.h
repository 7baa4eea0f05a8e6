#pragma once
// A decode or sparse decode case (common/decode_case.h) uploaded to one CUDA device, with the problem over the device
// buffers: the set-up every GPU decode test shares. Outputs start as the case holds them (poisoned); the workspace
// is the caller's. Header-only like test_cache_util.h, so each test executable stays self-contained.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <vector>

#include "common/decode_case.h"
#include "test_cache_util.h"

namespace mlakit::test {

/// A dense decode case on device `device`, which upload() makes current (the buffers must live where the problem
/// says they do). `ws` is left to the caller.
struct DeviceDecodeCase {
  DeviceBuffer q, cache, block_table, seq_lens, out, lse, scale, ws;
  DecodeProblem problem;

  /// `scale_on_device`: fp8_e4m3's scale read from a device scalar instead of the problem's value.
  void upload(const DecodeCase& c, bool scale_on_device, int device = 0) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess) << "cuda:" << device;  // left current: the caller's calls go there
    DeviceBuffer::upload(&q, c.q);
    DeviceBuffer::upload(&cache, c.cache);
    DeviceBuffer::upload(&block_table, c.block_table);
    DeviceBuffer::upload(&seq_lens, c.seq_lens);
    DeviceBuffer::upload(&out, c.out);
    DeviceBuffer::upload(&lse, c.lse);
    DeviceBuffer::upload(&scale, std::vector<float>{c.config.kv_scale});
    DecodeBuffers at;
    at.q = q.get();
    at.cache = cache.get();
    at.block_table = block_table.get();
    at.seq_lens = seq_lens.get();
    at.out = out.get();
    at.lse = lse.get();
    at.kv_scale = scale_on_device ? scale.as<float>() : nullptr;
    problem = c.problem(at, Device::cuda(device));
  }
  /// New contents of the same sizes (a case built with the same lengths), outputs poisoned again.
  void refill(const DecodeCase& c) {
    q.copy_from(c.q);
    cache.copy_from(c.cache);
    block_table.copy_from(c.block_table);
    seq_lens.copy_from(c.seq_lens);
    out.copy_from(c.out);
    lse.copy_from(c.lse);
  }
};

/// A sparse decode case on device `device` (made current by upload()); `ws` is left to the caller.
struct DeviceSparseCase {
  DeviceBuffer q, cache, indices, topk_length, attn_sink, out, lse, scale, ws;
  SparseDecodeProblem problem;

  void upload(const SparseCase& c, bool scale_on_device, int device = 0) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess) << "cuda:" << device;  // left current: the caller's calls go there
    DeviceBuffer::upload(&q, c.q);
    DeviceBuffer::upload(&cache, c.cache);
    DeviceBuffer::upload(&indices, c.indices);
    DeviceBuffer::upload(&topk_length, c.topk_length);
    DeviceBuffer::upload(&attn_sink, c.attn_sink);
    DeviceBuffer::upload(&out, c.out);
    DeviceBuffer::upload(&lse, c.lse);
    DeviceBuffer::upload(&scale, std::vector<float>{c.config.kv_scale});
    SparseBuffers at;
    at.q = q.get();
    at.cache = cache.get();
    at.indices = indices.get();
    at.topk_length = topk_length.get();
    at.attn_sink = attn_sink.get();
    at.out = out.get();
    at.lse = lse.get();
    at.kv_scale = scale_on_device ? scale.as<float>() : nullptr;
    problem = c.problem(at, Device::cuda(device));
  }
};

}  // namespace mlakit::test
