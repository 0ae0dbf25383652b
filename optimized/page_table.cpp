// The bidirectional page table.
#include "optimized/page_table.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

#include "reference/errors.h"

namespace kvcheck {

std::string HeadKey::where() const { return fmt::format("request {}, layer {}, head {}", request, layer, head); }

std::int64_t PageTable::length_for(std::int64_t max_seq_len, std::int64_t tokens_per_high_page) {
  if (max_seq_len <= 0) throw input_error("page table", "max_seq_len", "must be positive, got {}", max_seq_len);
  if (tokens_per_high_page <= 0) {
    throw input_error("page table", "tokens per high page", "must be positive, got {}", tokens_per_high_page);
  }
  return (max_seq_len + tokens_per_high_page - 1) / tokens_per_high_page + 1;
}

PageTable::PageTable(HeadKey key, std::int64_t length) : key_(key) {
  if (length <= 0) throw input_error(key_.where(), "page table length", "must be positive, got {}", length);
  entries_.assign(static_cast<std::size_t>(length), kNoPage);
}

PageId PageTable::at(int tier, std::int64_t i) const {
  if (i < 0 || i >= count(tier)) {
    throw std::out_of_range(fmt::format("{}: page table: tier {} has {} page(s), asked for {}", key_.where(), tier,
                                        count(tier), i));
  }
  return entries_[static_cast<std::size_t>(index(tier, i))];
}

void PageTable::require_room(std::int64_t extra) const {
  if (used() + extra > length()) {
    throw input_error(key_.where(), "page table",
                      "needs {} entries ({} high + {} low + {} new), the table has {} (max_seq_len too small for "
                      "the pages this head holds)",
                      used() + extra, high_, low_, extra, length());
  }
}

void PageTable::push(int tier, PageId id) {
  require_room(1);
  std::int64_t& n = tier == kHighTier ? high_ : low_;
  entries_[static_cast<std::size_t>(index(tier, n))] = id;
  ++n;
}

PageId PageTable::pop(int tier) {
  std::int64_t& n = tier == kHighTier ? high_ : low_;
  if (n == 0) throw std::logic_error(fmt::format("{}: page table: pop from an empty tier {}", key_.where(), tier));
  --n;
  PageId& e = entries_[static_cast<std::size_t>(index(tier, n))];
  const PageId id = e;
  e = kNoPage;
  return id;
}

void PageTable::clear() {
  std::fill(entries_.begin(), entries_.end(), kNoPage);
  high_ = low_ = 0;
}

PageId PageTable::erase(int tier, std::int64_t i) {
  if (i < 0 || i >= count(tier)) {
    throw std::logic_error(fmt::format("page table ({}): erase of page {} of a side of {}", key_.where(), i, count(tier)));
  }
  const PageId id = at(tier, i);
  for (std::int64_t j = i; j + 1 < count(tier); ++j) entries_[static_cast<std::size_t>(index(tier, j))] = at(tier, j + 1);
  pop(tier);
  return id;
}

PageId PageTable::replace(int tier, std::int64_t i, PageId id) {
  const PageId old = at(tier, i);
  entries_[static_cast<std::size_t>(index(tier, i))] = id;
  return old;
}

}  // namespace kvcheck
