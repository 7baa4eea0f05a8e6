#pragma once
// Minimal fork-join helper so the CPU demo is usable: splits [0, n) into contiguous chunks over
// std::thread. No pool and no global state: threads live for one call.

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace mlakit::reference {

/// Calls fn(i) for every i in [0, n), spread over up to hardware_concurrency threads.
/// `fn` must be safe to call concurrently for distinct i.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int64_t hw = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t workers = std::min(hw, n);
  if (workers == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(size_t(workers));
  for (int64_t w = 0; w < workers; ++w) {
    const int64_t begin = n * w / workers, end = n * (w + 1) / workers;
    threads.emplace_back([&fn, begin, end] {
      for (int64_t i = begin; i < end; ++i) fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace mlakit::reference
