// The free run of the flat circular free list and what one compaction round did to it: plain data
// shared by the CPU twin (kernels/cpu/compaction.h, where the round is described) and the CUDA
// version (kernels/compaction_cuda.h). C++17: nvcc compiles this header.
#pragma once

#include <cstdint>

namespace kvcheck {

// The free ids are list[start .. start + free_count), indices modulo the pool.
struct FreeRun {
  std::int64_t start = 0;
  std::int64_t free_count = 0;
};

struct CompactIdsResult {
  bool ok = false;               // false: the round needed more ids than were free; nothing changed
  FreeRun run;                   // the free run after the round (the one before when !ok)
  std::int64_t total_allocated = 0;
  std::int64_t total_recycled = 0;
};

}  // namespace kvcheck
