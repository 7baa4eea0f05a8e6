#pragma once
// Where a benchmark's buffers live and how it is timed: host memory for the CPU reference, CUDA memory
// and events for GPU backends. The CLI's workload code is written once against this interface.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlakit/kv_format.h"
#include "mlakit/status.h"
#include "mlakit/types.h"
#include "random_fill.h"

namespace mlakit::cli {

/// How flush_cache empties the last-level cache before a timed call (mlakit bench --flush).
enum class CacheFlush {
  /// Writes a buffer of twice the cache's size (triton's do_bench, which timed the anchors of docs/performance.md,
  /// writes 256 MB before each call): the cache is left full of dirty lines, which the timed call writes back to
  /// memory as its own reads evict them. The default, to compare like with like.
  kWrite,
  /// Reads such a buffer: the cache is left holding clean lines, as between kernels that write little, so the timed
  /// call pays for its own bytes only.
  kRead,
};

/// "write" or "read", as --flush and the JSON name them.
inline const char* cache_flush_name(CacheFlush how) { return how == CacheFlush::kWrite ? "write" : "read"; }

class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  virtual Device device() const = 0;
  /// The device's model as the driver names it ("NVIDIA H200"); empty for the CPU.
  virtual std::string model() const = 0;
  virtual Stream stream() const = 0;
  /// Null on failure (the caller reports how many bytes it asked for).
  virtual void* alloc(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual Status upload(void* dst, const void* src, size_t bytes) = 0;
  virtual Status download(void* dst, const void* src, size_t bytes) = 0;
  virtual Status fill_bytes(void* dst, uint8_t value, size_t bytes) = 0;
  /// bf16 values random_input(inputs, seed, i) for i in [0, count): uniform in [-1, 1) or standard normal.
  virtual Status fill_random_bf16(void* dst, int64_t count, uint64_t seed, Inputs inputs) = 0;
  /// `num_pages` packed pages of `page_size` tokens (bench_page_bytes() apart) of random_page_byte().
  virtual Status fill_random_cache(void* dst, int64_t num_pages, int64_t page_size, KvFormat format, int d_c, int d_r,
                                   uint64_t seed) = 0;
  /// Evicts the last-level cache so the next timed call reads from memory, the way set_cache_flush chose.
  virtual Status flush_cache() = 0;
  void set_cache_flush(CacheFlush how) { flush_how_ = how; }
  CacheFlush cache_flush() const { return flush_how_; }
  /// Runs `body` once and reports its duration (device events for CUDA, a steady clock for the CPU).
  virtual Status time_ms(const std::function<Status()>& body, double* ms) = 0;
  /// Host microseconds per launch of an empty kernel, launched as the library launches its kernels
  /// (cudaLaunchKernelEx, with programmatic stream serialisation from sm_90 on): the median over 5 batches of 200
  /// launches back to back, the floor under each launch of a call's host time (issue 11). not_supported where
  /// there is nothing to launch (the CPU).
  virtual Status empty_launch_us(double* us) = 0;

 protected:
  CacheFlush flush_how_ = CacheFlush::kWrite;
};

/// RAII allocation from a DeviceMemory.
class Buffer {
 public:
  Buffer() = default;
  Buffer(DeviceMemory* mem, size_t bytes) : mem_(mem), ptr_(mem->alloc(bytes)), bytes_(bytes) {}
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(mem_, o.mem_);
    std::swap(ptr_, o.ptr_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~Buffer() {
    if (mem_ && ptr_) mem_->release(ptr_);
  }
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  bool ok() const { return ptr_ != nullptr || bytes_ == 0; }

 private:
  DeviceMemory* mem_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/// A Buffer of `bytes` on `mem` into *buf, or "what bytes=N: allocation failed on <device>".
inline Status allocate_buffer(DeviceMemory* mem, Buffer* buf, size_t bytes, const char* what) {
  *buf = Buffer(mem, bytes);
  if (!buf->ok()) {
    return Status::invalid(std::string(what) + " bytes=" + std::to_string(bytes) + ": allocation failed on " +
                           device_name(mem->device()));
  }
  return {};
}

/// Median of repeated timings (the mean of the middle two for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

/// Host microseconds per call of `call` (issue 11): `calls` calls enqueued back to back with no synchronisation
/// between them, timed by the host's steady clock; the device is synchronised afterwards (by time_ms), outside
/// the measurement. On a GPU this is the CPU cost an engine pays per call in eager mode.
inline Status host_us_one_batch(DeviceMemory* mem, const std::function<Status()>& call, int calls, double* us) {
  double host_us = 0;
  double device_ms = 0;
  MLAKIT_TRY(mem->time_ms(
      [&]() -> Status {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < calls; ++i) MLAKIT_TRY(call());
        host_us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
        return {};
      },
      &device_ms));
  *us = host_us / calls;
  return {};
}

/// host_us_one_batch `batches` times, the median: a GPU machine's host swung by up to 40% between single batches
/// (docs/performance.md, 2026-11-25), which one slow batch would put into the row.
inline Status host_us_per_call(DeviceMemory* mem, const std::function<Status()>& call, int calls, double* us,
                               int batches_of_calls = 3) {
  std::vector<double> batches(static_cast<size_t>(batches_of_calls));
  for (double& b : batches) MLAKIT_TRY(host_us_one_batch(mem, call, calls, &b));
  *us = median(batches);
  return {};
}

/// The benchmark timing of one call: `iters` repetitions, each after a cache flush, timed by time_ms (median
/// into *median_ms), then the host time per call (host_us_per_call).
inline Status time_call(DeviceMemory* mem, const std::function<Status()>& call, int64_t iters, double* median_ms,
                        double* host_us) {
  std::vector<double> times;
  for (int64_t i = 0; i < iters; ++i) {
    double ms = 0;
    MLAKIT_TRY(mem->flush_cache());
    MLAKIT_TRY(mem->time_ms(call, &ms));
    times.push_back(ms);
  }
  *median_ms = median(times);
  return host_us_per_call(mem, call, int(iters), host_us);
}

/// Runs `allocate` (which allocates host memory, e.g. sizes a std::vector) and turns its failure into
/// "what bytes=N: allocation failed on cpu" instead of an exception.
template <typename Fn>
Status host_allocation(const std::string& what, size_t bytes, Fn&& allocate) {
  try {
    allocate();
  } catch (const std::bad_alloc&) {
    return Status::invalid(what + " bytes=" + std::to_string(bytes) + ": allocation failed on cpu");
  } catch (const std::length_error&) {
    return Status::invalid(what + " bytes=" + std::to_string(bytes) + ": allocation failed on cpu");
  }
  return {};
}

std::unique_ptr<DeviceMemory> make_cpu_memory();
/// CUDA memory on the current device, or a status saying why there is none (no GPU, or built without CUDA).
Status make_cuda_memory(std::unique_ptr<DeviceMemory>* out);

}  // namespace mlakit::cli
