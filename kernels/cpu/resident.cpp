#include "kernels/cpu/resident.h"

#include <algorithm>
#include <cstring>

namespace kvcheck {

void slot_max(std::span<const CudaHeadDesc> heads, std::span<const float> probs, std::span<float> maxima) {
  for (const CudaHeadDesc& h : heads) {
    if (h.probs < 0) continue;
    const float* p = probs.data() + h.probs;
    float* m = maxima.data() + h.probs / h.group;
    for (std::int64_t j = 0; j < h.slots; ++j) {
      float v = p[j];
      for (std::int64_t g = 1; g < h.group; ++g) v = std::max(v, p[g * h.slots + j]);
      m[j] = v;
    }
  }
}

void scatter_pages(std::span<const std::uint8_t> staged, std::span<const std::int32_t> ids, std::int64_t page_bytes,
                   std::int64_t words, std::byte* pool, std::uint64_t* masks) {
  const auto count = static_cast<std::int64_t>(ids.size());
  for (std::int64_t s = 0; s < count; ++s) {
    const std::int64_t id = ids[static_cast<std::size_t>(s)];
    std::memcpy(pool + id * page_bytes, staged.data() + s * page_bytes, static_cast<std::size_t>(page_bytes));
    std::memcpy(masks + id * words, staged.data() + count * page_bytes + s * words * 8,
                static_cast<std::size_t>(words) * sizeof(std::uint64_t));
  }
}

}  // namespace kvcheck
