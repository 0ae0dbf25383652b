// Device-side helpers shared by the CUDA kernels: warp reductions in one fixed butterfly order
// (lane l adds lane l ^ 16, then l ^ 8, ... l ^ 1, so every lane ends with the same value, and the
// same bits on every run), and the grid size of a launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kvcheck::cuda_detail {

constexpr unsigned kFullMask = 0xFFFFFFFFu;

// The sum of v over the 32 lanes of the warp, on every lane (float or double).
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(kFullMask, v, o);
  return v;
}

// The max of v over the 32 lanes of the warp, on every lane.
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, o));
  return v;
}

// Blocks of per_block items that cover `items`.
inline unsigned blocks_for(std::int64_t items, std::int64_t per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

}  // namespace kvcheck::cuda_detail
