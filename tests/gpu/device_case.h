#pragma once
// A decode or sparse decode case (common/decode_case.h) uploaded to one CUDA device, with the problem over the device
// buffers: the set-up every GPU decode test shares. Outputs start as the case holds them (poisoned); the workspace
// is the caller's. Header-only like test_cache_util.h, so each test executable stays self-contained.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "common/decode_case.h"
#include "test_cache_util.h"

namespace mlakit::test {

/// A dense decode case on device `device`, which upload() makes current (the buffers must live where the problem
/// says they do). `ws` is left to the caller.
struct DeviceDecodeCase {
  DeviceBuffer q, cache, block_table, seq_lens, out, lse, scale, ws, k_pe_cache, table_indptr;
  DecodeProblem problem;

  /// `scale_on_device`: fp8_e4m3's scale read from a device scalar, and the problem's kv_scale_value NaN, so that a
  /// kernel that read the value instead would fail. `cache_bytes`: room for a larger cache later (refill).
  void upload(const DecodeCase& c, bool scale_on_device, int device = 0, size_t cache_bytes = 0) {
    ASSERT_EQ(cudaSetDevice(device), cudaSuccess) << "cuda:" << device;  // left current: the caller's calls go there
    DeviceBuffer::upload(&q, c.q);
    DeviceBuffer::upload(&cache, c.cache, cache_bytes);
    DeviceBuffer::upload(&block_table, c.block_table);
    DeviceBuffer::upload(&seq_lens, c.seq_lens);
    DeviceBuffer::upload(&out, c.out);
    DeviceBuffer::upload(&lse, c.lse);
    DeviceBuffer::upload(&scale, std::vector<float>{c.config.kv_scale});
    DeviceBuffer::upload(&k_pe_cache, c.k_pe_cache);      // split caches only (split_case)
    DeviceBuffer::upload(&table_indptr, c.table_indptr);  // flat block tables only (split_case)
    DecodeBuffers at;
    at.q = q.get();
    at.cache = cache.get();
    at.block_table = block_table.get();
    at.seq_lens = seq_lens.get();
    at.out = out.get();
    at.lse = lse.get();
    at.kv_scale = scale_on_device ? scale.as<float>() : nullptr;
    at.k_pe_cache = k_pe_cache.get();
    at.block_table_indptr = table_indptr.get();
    problem = c.problem(at, Device::cuda(device));
    if (scale_on_device) problem.kv.kv_scale_value = std::numeric_limits<float>::quiet_NaN();
  }
  /// New contents of the same sizes (a case built with the same lengths; a cache up to upload's cache_bytes),
  /// outputs poisoned again, the device scalar of the scale as the new case has it (the problem, with its
  /// kv_scale_value, and the split-cache and flat-table buffers stay as upload made them).
  void refill(const DecodeCase& c) {
    q.copy_from(c.q);
    cache.copy_from(c.cache);
    block_table.copy_from(c.block_table);
    seq_lens.copy_from(c.seq_lens);
    out.copy_from(c.out);
    lse.copy_from(c.lse);
    scale.copy_from(std::vector<float>{c.config.kv_scale});
  }
  /// out's 16-bit values and lse as the device holds them, in the case's sizes.
  std::vector<uint16_t> out_bits(const DecodeCase& c) const { return out.download<uint16_t>(c.out.size()); }
  std::vector<float> lse_values(const DecodeCase& c) const { return lse.download<float>(c.lse.size()); }
};

/// A sparse decode case on device `device` (made current by upload()); `ws` is left to the caller.
struct DeviceSparseCase {
  DeviceBuffer q, cache, indices, topk_length, attn_sink, out, lse, scale, ws;
  SparseDecodeProblem problem;

  /// `scale_on_device` as for DeviceDecodeCase::upload (the problem's kv_scale_value then NaN).
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
    if (scale_on_device) problem.kv.kv_scale_value = std::numeric_limits<float>::quiet_NaN();
  }
};

}  // namespace mlakit::test
