// The circular free page list.
#include "optimized/free_page_list.h"

#include <numeric>

#include "optimized/pool_exhausted.h"
#include "reference/errors.h"

namespace kvcheck {

FreePageList::FreePageList(std::int64_t pages) {
  if (pages <= 0 || pages > INT32_MAX) {
    throw input_error("page pool", "pages", "must be in [1, {}], got {}", INT32_MAX, pages);
  }
  slots_.resize(static_cast<std::size_t>(pages));
  std::iota(slots_.begin(), slots_.end(), PageId{0});
  free_count_ = pages;
}

std::int64_t FreePageList::wrap(std::int64_t position) const {
  const std::int64_t n = pool_size();
  const std::int64_t r = position % n;
  return r < 0 ? r + n : r;
}

std::int64_t FreePageList::reserve_allocation(std::int64_t n) const {
  if (n < 0 || n > free_count_) throw PoolExhausted("allocation", n, free_count_);
  return start_;
}

void FreePageList::commit(std::int64_t allocated, std::int64_t recycled) {
  if (allocated < 0 || allocated > free_count_) throw PoolExhausted("allocation", allocated, free_count_);
  if (recycled < 0 || free_count_ - allocated + recycled > pool_size()) {
    throw std::logic_error(fmt::format("free page list: recycling {} page(s) would exceed the pool of {}",
                                       recycled, pool_size()));
  }
  start_ = wrap(start_ + allocated);
  free_count_ += recycled - allocated;
}

std::vector<PageId> FreePageList::allocate(std::int64_t n) {
  const std::int64_t first = reserve_allocation(n);
  std::vector<PageId> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = id_at(first + i);
  commit(n, 0);
  return ids;
}

void FreePageList::recycle(std::span<const PageId> ids) {
  const std::int64_t n = static_cast<std::int64_t>(ids.size());
  if (free_count_ + n > pool_size()) {
    throw std::logic_error(fmt::format("free page list: recycling {} page(s) would exceed the pool of {}",
                                       n, pool_size()));
  }
  const std::int64_t end = end_position();
  for (std::int64_t i = 0; i < n; ++i) put_at(end + i, ids[static_cast<std::size_t>(i)]);
  commit(0, n);
}

std::vector<PageId> FreePageList::free_ids() const {
  std::vector<PageId> ids(static_cast<std::size_t>(free_count_));
  for (std::int64_t i = 0; i < free_count_; ++i) ids[static_cast<std::size_t>(i)] = id_at(start_ + i);
  return ids;
}

}  // namespace kvcheck
