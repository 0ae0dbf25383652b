#include "optimized/pool_mirror.h"

#include <cstring>

namespace kvcheck {

void PoolMirror::stale(const PagePool& pool, std::span<const PageId> pages, std::vector<PageId>& out) {
  if (pool_ != &pool || static_cast<std::int64_t>(held_.size()) != pool.pages()) {
    pool_ = &pool;
    held_.assign(static_cast<std::size_t>(pool.pages()), 0);
  }
  for (const PageId id : pages) {
    std::uint64_t& held = held_.at(static_cast<std::size_t>(id));
    const std::uint64_t now = pool.version(id);
    if (held == now) continue;
    held = now;
    out.push_back(id);
    ++taken_;
  }
}

void stage_pages(const PagePool& pool, std::span<const PageId> ids, std::vector<std::uint8_t>& staging) {
  const auto page_bytes = static_cast<std::size_t>(pool.page_bytes());
  const auto words = static_cast<std::size_t>(pool.mask_words());
  const std::size_t count = ids.size();
  staging.resize(count * (page_bytes + words * sizeof(std::uint64_t)));
  for (std::size_t s = 0; s < count; ++s) {
    std::memcpy(staging.data() + s * page_bytes, pool.bytes(ids[s]).data(), page_bytes);
    std::memcpy(staging.data() + count * page_bytes + s * words * sizeof(std::uint64_t), pool.live_mask(ids[s]).data(),
                words * sizeof(std::uint64_t));
  }
}

}  // namespace kvcheck
