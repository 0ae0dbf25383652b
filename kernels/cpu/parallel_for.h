// A small deterministic parallel-for over [0, n): `threads` contiguous chunks, chunk i on its own
// std::thread (chunk 0 on the caller). Each index is visited once; what a body writes must be
// disjoint per index, so the result does not depend on scheduling. The first exception (in chunk
// order) is rethrown after every chunk has finished.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace kvcheck {

// body(begin, end) for each chunk. Runs inline when threads <= 1 or n < min_parallel.
template <typename Body>
void parallel_for_chunks(std::int64_t n, int threads, std::int64_t min_parallel, Body&& body) {
  if (n <= 0) return;
  const std::int64_t t = std::min<std::int64_t>(std::max(threads, 1), n);
  if (t <= 1 || n < min_parallel) {
    body(std::int64_t{0}, n);
    return;
  }
  const std::int64_t chunk = (n + t - 1) / t;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(t));
  std::vector<std::thread> workers;
  workers.reserve(static_cast<std::size_t>(t - 1));
  auto run = [&](std::int64_t c) {
    try {
      const std::int64_t begin = c * chunk;
      const std::int64_t end = std::min(n, begin + chunk);
      if (begin < end) body(begin, end);
    } catch (...) {
      errors[static_cast<std::size_t>(c)] = std::current_exception();
    }
  };
  for (std::int64_t c = 1; c < t; ++c) workers.emplace_back(run, c);
  run(0);
  for (std::thread& w : workers) w.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// body(i) for each i in [0, n).
template <typename Body>
void parallel_for(std::int64_t n, int threads, std::int64_t min_parallel, Body&& body) {
  parallel_for_chunks(n, threads, min_parallel, [&body](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) body(i);
  });
}

}  // namespace kvcheck
