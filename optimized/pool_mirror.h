// What a copy of the page pool held elsewhere (a device's) holds, by page stamp (PagePool::version):
// before a read of some pages, stale() names those whose stamp moved since the copy last took
// them, and marks them taken; the caller copies exactly those (bytes and live mask). So the copy
// reads as the pool does for every page it is asked about, and a page crosses only after the host
// changed it: a write of the host path (prefill, a token stored on the host), a move or kill of
// the page manager (compaction, eviction), a swap-in or a copy-on-write. Decode attention does not
// read scores, and a score alone leaves the stamp (page_pool.h).
//
// The host twin (optimized/host_twin_backend.h, mirrored) reads its own copy this way, so the gate
// holds this bookkeeping to the CPU engine's bits; the CUDA resident backend keeps its device copy
// of the pool with it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "optimized/page_pool.h"

namespace kvcheck {

class PoolMirror {
 public:
  // Appends to `out` each page of `pages` whose copy is stale (once, in first-seen order), and
  // records the pool's stamp for it as held. A pool other than the last one asked about (or of
  // another size) makes every page stale.
  void stale(const PagePool& pool, std::span<const PageId> pages, std::vector<PageId>& out);
  // Pages copied since the mirror was made.
  std::int64_t pages_taken() const { return taken_; }

 private:
  const PagePool* pool_ = nullptr;
  std::vector<std::uint64_t> held_;  // per page id: the stamp of the copy, 0: none
  std::int64_t taken_ = 0;
};

// The stale pages as one upload: their bytes (page_bytes each), then their live words (`words`
// each), in the order of `ids`: what scatter_pages (kernels/cpu/resident.h) and its kernel
// scatter_pages_cuda_device (kernels/resident_cuda.h) read.
void stage_pages(const PagePool& pool, std::span<const PageId> ids, std::vector<std::uint8_t>& staging);

}  // namespace kvcheck
