#pragma once
// Minimal fork-join helper so the CPU demo is usable: splits [0, n) into contiguous chunks over
// std::thread. No pool and no state shared between calls: threads live for one call. A call made from inside a worker
// of another runs serially in that worker (the outer call already uses every core), so that an operation can
// parallelise its outer loop when it is long (many requests) and its inner loops otherwise, without spawning
// threads per request: thread spawns dominated the reference's time on batches of thousands of short requests.

#include <algorithm>
#include <cstdint>
#include <thread>
#include <vector>

namespace mlakit::reference {

/// Threads parallel_for may use: hardware_concurrency, at least 1.
inline int64_t parallel_workers() { return std::max<int64_t>(1, std::thread::hardware_concurrency()); }

/// True in a worker thread of parallel_for, for the duration of its chunk.
inline bool& in_parallel_worker() {
  thread_local bool inside = false;
  return inside;
}

/// Calls fn(i) for every i in [0, n), spread over up to hardware_concurrency threads (serially when called from a
/// worker of another parallel_for). `fn` must be safe to call concurrently for distinct i.
template <typename Fn>
void parallel_for(int64_t n, Fn&& fn) {
  if (n <= 0) return;
  const int64_t workers = in_parallel_worker() ? 1 : std::min(parallel_workers(), n);
  if (workers == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(size_t(workers));
  for (int64_t w = 0; w < workers; ++w) {
    const int64_t begin = n * w / workers, end = n * (w + 1) / workers;
    threads.emplace_back([&fn, begin, end] {
      in_parallel_worker() = true;
      for (int64_t i = begin; i < end; ++i) fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

/// fn(i) for i in [0, n): the outer loop of an operation whose items have inner parallel loops. Spread over the
/// threads (each item's inner loops then serial) when there are at least two items per thread; otherwise in order,
/// each item's inner loops parallel.
template <typename Fn>
void parallel_outer(int64_t n, Fn&& fn) {
  if (n >= 2 * parallel_workers()) {
    parallel_for(n, fn);
  } else {
    for (int64_t i = 0; i < n; ++i) fn(i);
  }
}

}  // namespace mlakit::reference
