// Decode attention's descriptors for a resident batch (docs/design.md §15): what the CUDA resident
// backend hands paged_decode_attention_cuda_device (kernels/paged_attention_cuda.h), made on the
// host from its record of the page table. Every head shares one tier list (the cache's tiers, in
// order); page p of the pool is read at byte p x page_bytes of the pool's copy and its live bits
// at word p x words; head k (k = row x kv_heads + kv head) reads its queries and writes its output
// at k x group x head_dim; with slot maxima asked, its probabilities at the running sum of
// group x slots.
//
// The mirrored host twin (optimized/host_twin_backend.h) runs the CPU kernel through these same
// descriptors over its own copy of the pool (decode_inputs_of), and takes the slot maxima in the
// same layout as the device (kernels/cpu/resident.h's slot_max), so the gate's twin properties
// hold this bookkeeping, offsets and all, on every policy.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/paged_attention_cuda.h"
#include "optimized/page_pool.h"
#include "optimized/resident_backend.h"
#include "optimized/resident_host_side.h"

namespace kvcheck {

class PagedKvCache;
class KvPolicy;

// rows[k] for head k (k = row x kv_heads + kv head) of `a`: its row of `table`, cut for a
// page-selecting policy to the pages it chooses from the head's queries (q: host floats, every
// row's) over the cache's pool, chosen[k] their indices (empty otherwise); `pages` every page id
// the rows name, in order (the pages the attention reads). row_requests: [rows][2] int32s (the
// runner's upload). std::logic_error for a head the table has no row for.
void resident_head_rows(const ResidentTable& table, const PagedKvCache& cache, const KvPolicy& policy,
                        const ResidentAttention& a, std::span<const std::int32_t> row_requests,
                        std::span<const float> q, std::vector<std::vector<std::int32_t>>& rows,
                        std::vector<std::vector<std::size_t>>& chosen, std::vector<PageId>& pages);

struct ResidentAttentionDescs {
  std::vector<CudaTierDesc> tiers;
  std::vector<CudaPageDesc> pages;
  std::vector<CudaHeadDesc> heads;
  std::int64_t probs = 0;    // probability elements (0 without slot maxima)
  std::int64_t scratch = 0;  // the kernel's scratch_elements
};

// rows[k]: head k's (page id, tier) pairs in walk order (a page-selecting policy's choice already
// made). std::logic_error for a page id outside the pool or a tier outside `tiers`.
ResidentAttentionDescs resident_attention_descs(std::span<const TierRead> tiers, const PagePool& pool,
                                                std::span<const std::vector<std::int32_t>> rows,
                                                const ResidentAttention& a);

// The CPU kernel's inputs for the same descriptors: head k's pages read at pool_bytes +
// desc.bytes with live bits at masks + desc.live (words per page: `words`), its queries from q,
// its output into out, its probabilities (when the head has them) into probs. `pages` keeps the
// PageReads the inputs point into.
void decode_inputs_of(const ResidentAttentionDescs& d, std::span<const TierRead> tiers, const std::byte* pool_bytes,
                      const std::uint64_t* masks, std::int64_t words, std::span<const float> q, std::span<float> out,
                      std::span<float> probs, std::vector<std::vector<PageRead>>& pages,
                      std::vector<DecodeHeadInput>& in, std::vector<DecodeHeadOutput>& outs);

}  // namespace kvcheck
