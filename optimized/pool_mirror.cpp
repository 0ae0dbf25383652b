#include "optimized/pool_mirror.h"

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

}  // namespace kvcheck
