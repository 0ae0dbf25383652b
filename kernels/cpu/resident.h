// The CPU twins of the resident step's own kernels (kernels/resident_cuda.h,
// kernels/cuda/resident.cu), same names and layouts: the slot maxima of decode attention's
// probabilities over a GQA group, and the scatter of staged pages into a copy of the page pool.
// The mirrored host twin (optimized/host_twin_backend.h) runs them where the CUDA resident
// backend launches the kernels, so the gate's twin properties hold the layouts the kernels use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/paged_attention_cuda.h"

namespace kvcheck {

// maxima[h.probs / h.group + j] = max over g < h.group of probs[h.probs + g x h.slots + j] for
// each head with probabilities (h.probs >= 0).
void slot_max(std::span<const CudaHeadDesc> heads, std::span<const float> probs, std::span<float> maxima);

// Staged page i (`ids.size()` pages of page_bytes bytes, then as many masks of `words` live
// words, in `staged`) into page ids[i] of the copy ([pages][page_bytes] bytes, [pages][words]).
void scatter_pages(std::span<const std::uint8_t> staged, std::span<const std::int32_t> ids, std::int64_t page_bytes,
                   std::int64_t words, std::byte* pool, std::uint64_t* masks);

}  // namespace kvcheck
