// A small deterministic work splitter for the reference (reference/ may not include kernels/):
// items [0, n) handed out one at a time to `threads` std::threads (the caller is one of them).
// Each item is computed whole by one thread, so a body that writes only its item's outputs gives
// results that do not depend on the thread count or the scheduling.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace kvcheck {

// threads <= 0: every core.
inline int resolve_threads(int threads) {
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

// body(item, worker) for every item in [0, n); worker in [0, min(threads, n)) names the thread,
// for per-thread scratch. The first exception (by worker) is rethrown once every thread is done.
template <typename Body>
void parallel_items(std::int64_t n, int threads, Body&& body) {
  if (n <= 0) return;
  const int t = static_cast<int>(std::min<std::int64_t>(resolve_threads(threads), n));
  if (t <= 1) {
    for (std::int64_t i = 0; i < n; ++i) body(i, 0);
    return;
  }
  std::atomic<std::int64_t> next{0};
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(t));
  auto run = [&](int worker) {
    try {
      for (std::int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) body(i, worker);
    } catch (...) {
      errors[static_cast<std::size_t>(worker)] = std::current_exception();
      next.store(n);  // the others stop at their next item
    }
  };
  std::vector<std::thread> helpers;
  helpers.reserve(static_cast<std::size_t>(t - 1));
  for (int w = 1; w < t; ++w) helpers.emplace_back(run, w);
  run(0);
  for (std::thread& h : helpers) h.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// The number of workers parallel_items(n, threads, ...) uses: per-thread scratch is sized by it.
inline int parallel_workers(std::int64_t n, int threads) {
  return static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(resolve_threads(threads), n)));
}

}  // namespace kvcheck
