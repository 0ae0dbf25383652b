// Exclusive prefix sum over per-head page counts: the coordination step of LeanKV's parallel KV
// compaction (docs/design.md §6). out[i] = in[0] + ... + in[i-1], out[0] = 0; the
// return value is the total. With counts {2, 0, 3, 1}: offsets {0, 2, 2, 5}, total 6.
//
// CPU twin of the CUB scan in kernels/cuda/compaction.cu: a blocked parallel scan (each of
// `threads` blocks sums its range, the block sums are scanned serially, each block then scans its
// range from its offset). Integer addition is exact, so every thread count gives the same result.
#pragma once

#include <cstdint>
#include <span>

namespace kvcheck {

// Below this many elements the scan runs on the calling thread whatever `threads` says.
inline constexpr std::int64_t kScanMinParallel = 1 << 15;

// in and out may be the same span. Negative counts are the caller's bug (not checked).
std::int64_t exclusive_scan(std::span<const std::int64_t> in, std::span<std::int64_t> out, int threads = 1,
                            std::int64_t min_parallel = kScanMinParallel);

}  // namespace kvcheck
