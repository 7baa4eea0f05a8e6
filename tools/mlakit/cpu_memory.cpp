// DeviceMemory for the CPU reference: plain host allocations and a steady clock.

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "device_memory.h"
#include "mlakit/numeric.h"
#include "random_fill.h"

namespace mlakit::cli {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kFlushBytes = size_t(64) << 20;  // larger than any CPU's last-level cache here

class CpuMemory final : public DeviceMemory {
 public:
  Device device() const override { return Device::cpu(); }
  std::string model() const override { return {}; }
  Status empty_launch_us(double*) override { return Status::not_supported("the CPU launches no kernels"); }
  Stream stream() const override { return nullptr; }
  void* alloc(size_t bytes) override {  // null on failure, never an exception (Buffer reports the bytes)
    if (bytes > SIZE_MAX - kAlign) return nullptr;  // rounding up to the alignment would wrap
    return std::aligned_alloc(kAlign, (bytes + kAlign - 1) / kAlign * kAlign);
  }
  void release(void* p) override { std::free(p); }
  Status upload(void* dst, const void* src, size_t bytes) override { return copy(dst, src, bytes); }
  Status download(void* dst, const void* src, size_t bytes) override { return copy(dst, src, bytes); }
  Status fill_bytes(void* dst, uint8_t value, size_t bytes) override {
    std::memset(dst, value, bytes);
    return {};
  }
  Status fill_random_bf16(void* dst, int64_t count, uint64_t seed, Inputs inputs) override {
    auto* out = static_cast<uint16_t*>(dst);
    for (int64_t i = 0; i < count; ++i) out[i] = float_to_bf16(random_input(inputs, seed, uint64_t(i)));
    return {};
  }
  Status fill_random_cache(void* dst, int64_t num_pages, int64_t page_size, KvFormat format, int d_c, int d_r,
                           uint64_t seed) override {
    const int64_t page_bytes = bench_page_bytes(format, d_c, d_r, page_size);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t g = 0; g < num_pages; ++g) {
      for (int64_t k = 0; k < page_bytes; ++k) {
        out[g * page_bytes + k] = random_page_byte(format, d_c, d_r, seed, page_size, g, k);
      }
    }
    return {};
  }
  Status flush_cache() override {
    const bool first = flush_.empty();
    if (flush_how_ == CacheFlush::kWrite || first) {
      MLAKIT_TRY(host_allocation("cache flush buffer", kFlushBytes,
                                 [&] { flush_.assign(kFlushBytes, uint8_t(flush_.empty() ? 1 : flush_[0] + 1)); }));
      if (flush_how_ == CacheFlush::kWrite) return {};
    }
    // The read flush: one read per cache line, twice after the buffer was just written, so that the lines left are
    // clean whatever the cache's size up to the buffer's.
    for (int pass = 0; pass < (first ? 2 : 1); ++pass) {
      uint8_t sum = 0;
      for (size_t i = 0; i < flush_.size(); i += 64) sum = uint8_t(sum + flush_[i]);
      sink_ = sum;
    }
    return {};
  }
  Status time_ms(const std::function<Status()>& body, double* ms) override {
    const auto t0 = std::chrono::steady_clock::now();
    Status s = body();
    *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return s;
  }

 private:
  static Status copy(void* dst, const void* src, size_t bytes) {
    if (bytes) std::memcpy(dst, src, bytes);
    return {};
  }
  std::vector<uint8_t> flush_;
  volatile uint8_t sink_ = 0;  // keeps the read flush's loads
};

}  // namespace

std::unique_ptr<DeviceMemory> make_cpu_memory() { return std::make_unique<CpuMemory>(); }

}  // namespace mlakit::cli
