// Blocked parallel exclusive scan.
#include "kernels/cpu/exclusive_scan.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/cpu/parallel_for.h"

namespace kvcheck {

std::int64_t exclusive_scan(std::span<const std::int64_t> in, std::span<std::int64_t> out, int threads,
                            std::int64_t min_parallel) {
  if (out.size() != in.size()) throw std::invalid_argument("exclusive_scan: out and in differ in length");
  const auto n = static_cast<std::int64_t>(in.size());
  const std::int64_t blocks = (threads <= 1 || n < min_parallel) ? 1 : std::min<std::int64_t>(threads, n);
  const std::int64_t chunk = blocks == 0 ? 0 : (n + blocks - 1) / blocks;
  // Pass 1: the sum of each block.
  std::vector<std::int64_t> block_sum(static_cast<std::size_t>(std::max<std::int64_t>(blocks, 1)), 0);
  parallel_for(blocks, static_cast<int>(blocks), 2, [&](std::int64_t b) {
    std::int64_t s = 0;
    for (std::int64_t i = b * chunk; i < std::min(n, (b + 1) * chunk); ++i) s += in[static_cast<std::size_t>(i)];
    block_sum[static_cast<std::size_t>(b)] = s;
  });
  // Pass 2: exclusive scan of the block sums (serial: `blocks` is the thread count).
  std::int64_t total = 0;
  for (std::int64_t& s : block_sum) {
    const std::int64_t v = s;
    s = total;
    total += v;
  }
  // Pass 3: each block scans its range from its offset (in may alias out: read before write).
  parallel_for(blocks, static_cast<int>(blocks), 2, [&](std::int64_t b) {
    std::int64_t running = block_sum[static_cast<std::size_t>(b)];
    for (std::int64_t i = b * chunk; i < std::min(n, (b + 1) * chunk); ++i) {
      const std::int64_t v = in[static_cast<std::size_t>(i)];
      out[static_cast<std::size_t>(i)] = running;
      running += v;
    }
  });
  return total;
}

}  // namespace kvcheck
