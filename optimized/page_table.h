// LeanKV's bidirectional page table (docs/design.md §6; LeanKV section 5.2): one per
// (request, layer, kv-head). High-precision page ids grow from the left end, low-precision ids
// from the right end; the two sides never cross.
//
// Length. LeanKV sizes an entry as max_seq_len / tokens_per_high_page. With whole pages that is
// one short: a head holding h high and l low tokens (h + l <= M, a <= b tokens per high / low
// page) needs ceil(h/a) + ceil(l/b) <= ceil(h/a) + ceil(l/a) <= ceil((h+l)/a) + 1 <= ceil(M/a) + 1
// entries, and the bound is reached (M = 2, a = 2, b = 3, h = l = 1: 2 entries, ceil(M/a) = 1).
// So length_for(M, a) = ceil(M/a) + 1. During generation a head can still ask for more (slots
// freed by eviction or demotion are reused but never returned), and that is reported: every
// operation that would need more entries than the table has throws InputError naming the
// request, layer and head, before anything changes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "optimized/free_page_list.h"

namespace kvcheck {

inline constexpr PageId kNoPage = -1;
inline constexpr int kHighTier = 0;
inline constexpr int kLowTier = 1;
inline constexpr int kTiers = 2;  // per-tier arrays are [kTiers], indexed by kHighTier and kLowTier

// Which (request, layer, kv-head) a table or a page belongs to.
struct HeadKey {
  std::int64_t request = -1;
  std::int32_t layer = -1;
  std::int32_t head = -1;
  // "request 3, layer 1, head 0"
  std::string where() const;
  bool operator==(const HeadKey&) const = default;
};

class PageTable {
 public:
  // ceil(max_seq_len / tokens_per_high_page) + 1 (see above). InputError unless both are positive.
  static std::int64_t length_for(std::int64_t max_seq_len, std::int64_t tokens_per_high_page);

  PageTable(HeadKey key, std::int64_t length);

  const HeadKey& key() const { return key_; }
  std::int64_t length() const { return static_cast<std::int64_t>(entries_.size()); }
  std::int64_t count(int tier) const { return tier == kHighTier ? high_ : low_; }
  std::int64_t used() const { return high_ + low_; }
  std::int64_t room() const { return length() - used(); }
  // The i-th page of a tier: high i at entry i, low i at entry length - 1 - i.
  PageId at(int tier, std::int64_t i) const;
  // The raw entries (kNoPage between the two sides).
  std::span<const PageId> entries() const { return entries_; }

  // Throws InputError (naming the head) unless `extra` more entries fit.
  void require_room(std::int64_t extra) const;
  // Adds a page at the inner end of a tier's side (InputError when the table is full).
  void push(int tier, PageId id);
  // Removes and returns the innermost page of a tier (logic_error when the side is empty).
  PageId pop(int tier);
  // Removes the i-th page of a tier, the pages after it moving one place toward the outer end
  // (free-block: an emptied page in the middle of a side); returns it.
  PageId erase(int tier, std::int64_t i);
  // Puts `id` in place of the i-th page of a tier (copy-on-write); returns the page it replaces.
  PageId replace(int tier, std::int64_t i, PageId id);
  void clear();

 private:
  std::int64_t index(int tier, std::int64_t i) const { return tier == kHighTier ? i : length() - 1 - i; }

  HeadKey key_;
  std::vector<PageId> entries_;
  std::int64_t high_ = 0;
  std::int64_t low_ = 0;
};

}  // namespace kvcheck
