// The circular free page list of LeanKV's unified page pool (docs/design.md §6).
//
// An array holding every page id of the pool once. Free ids are the circular run
// slots[start .. start + free_count) (indices modulo the pool size); used ids occupy the rest.
// Allocation takes ids from the start pointer, recycling writes ids at the end pointer
// (start + free_count), and both pointers wrap. The free ids are therefore always one contiguous
// circular run, which is what lets parallel compaction hand each head a disjoint sub-range by a
// prefix sum: head h allocates the ids at start + offset_h ... and recycles into end + offset_h ...
//
// Two ways to use it:
//   - allocate(n) / recycle(ids): one caller, pointers advanced immediately;
//   - the three-step protocol of parallel compaction: reserve_allocation(n) returns the position
//     of the first reserved id, any number of threads read id_at(position + i) for their own
//     disjoint offsets and write put_at(end_position() + j, id) for the ids they recycle, then
//     commit(allocated, recycled) advances both pointers once. Nothing between reserve and
//     commit changes the pointers, so a failed plan leaves the list untouched.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvcheck {

using PageId = std::int32_t;

class FreePageList {
 public:
  // A pool of `pages` pages, all free, in id order.
  explicit FreePageList(std::int64_t pages);

  std::int64_t pool_size() const { return static_cast<std::int64_t>(slots_.size()); }
  std::int64_t free_count() const { return free_count_; }
  std::int64_t used_count() const { return pool_size() - free_count_; }
  std::int64_t start_position() const { return start_; }
  std::int64_t end_position() const { return wrap(start_ + free_count_); }

  // Takes n ids from the start pointer. Throws PoolExhausted (nothing changed) when fewer than n
  // are free.
  std::vector<PageId> allocate(std::int64_t n);
  // Returns ids to the end pointer. The caller guarantees they are used ids, each once (checked
  // by the properties, not here: this is the hot path).
  void recycle(std::span<const PageId> ids);

  // The parallel-compaction protocol (see above). Positions are circular indices into the array.
  std::int64_t wrap(std::int64_t position) const;
  PageId id_at(std::int64_t position) const { return slots_[wrap(position)]; }
  void put_at(std::int64_t position, PageId id) { slots_[wrap(position)] = id; }
  // Throws PoolExhausted when `allocated` ids are not free; otherwise advances start by
  // `allocated` and end by `recycled`.
  void commit(std::int64_t allocated, std::int64_t recycled);
  // Throws PoolExhausted (nothing changed) unless n ids are free; returns the start position.
  std::int64_t reserve_allocation(std::int64_t n) const;

  // The free ids, from the start pointer to the end pointer (for checks and statistics).
  std::vector<PageId> free_ids() const;
  // The raw array (for the device copy and the invariant checks).
  const std::vector<PageId>& slots() const { return slots_; }
  std::vector<PageId>& mutable_slots() { return slots_; }

 private:
  std::vector<PageId> slots_;
  std::int64_t start_ = 0;
  std::int64_t free_count_ = 0;
};

}  // namespace kvcheck
