// The circular free page list: allocation from the start pointer, recycling at the end pointer,
// both wrapping; exhaustion reported before anything changes.
#include <gtest/gtest.h>

#include <vector>

#include "optimized/free_page_list.h"
#include "optimized/pool_exhausted.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

TEST(FreePageList, AllocatesInIdOrderFromAFreshPool) {
  FreePageList list(5);
  EXPECT_EQ(list.allocate(3), (std::vector<PageId>{0, 1, 2}));
  EXPECT_EQ(list.free_count(), 2);
  EXPECT_EQ(list.start_position(), 3);
  EXPECT_EQ(list.end_position(), 0);  // start 3 + 2 free, wrapped
  EXPECT_EQ(list.free_ids(), (std::vector<PageId>{3, 4}));
}

TEST(FreePageList, RecyclingWritesAtTheEndAndBothPointersWrap) {
  FreePageList list(4);
  const std::vector<PageId> a = list.allocate(3);  // start 3, free {3}
  const std::vector<PageId> r1{a[1]};
  list.recycle(r1);                               // slots[0] = 1: free run is positions 3, 0
  EXPECT_EQ(list.free_ids(), (std::vector<PageId>{3, 1}));
  EXPECT_EQ(list.allocate(2), (std::vector<PageId>{3, 1}));  // start wraps 3 -> 0 -> 1
  EXPECT_EQ(list.start_position(), 1);
  EXPECT_EQ(list.free_count(), 0);
  EXPECT_EQ(list.end_position(), 1);
  const std::vector<PageId> r2{2, 0, 3};
  list.recycle(r2);  // written at positions 1, 2, 3
  EXPECT_EQ(list.free_ids(), (std::vector<PageId>{2, 0, 3}));
  EXPECT_EQ(list.end_position(), 0);
}

TEST(FreePageList, ExhaustionThrowsAndChangesNothing) {
  FreePageList list(3);
  list.allocate(2);
  const auto before = list.slots();
  try {
    list.allocate(2);
    FAIL() << "expected PoolExhausted";
  } catch (const PoolExhausted& e) {
    EXPECT_EQ(e.needed(), 2);
    EXPECT_EQ(e.available(), 1);
    EXPECT_NE(std::string(e.what()).find("needs 2 page(s), 1 free"), std::string::npos) << e.what();
  }
  EXPECT_EQ(list.slots(), before);
  EXPECT_EQ(list.free_count(), 1);
  EXPECT_EQ(list.start_position(), 2);
}

TEST(FreePageList, ReserveThenCommitAdvancesPointersOnce) {
  FreePageList list(6);
  const std::int64_t first = list.reserve_allocation(4);
  EXPECT_EQ(first, 0);
  EXPECT_EQ(list.id_at(first + 3), 3);
  EXPECT_EQ(list.free_count(), 6);  // reserving changes nothing
  list.commit(4, 0);
  EXPECT_EQ(list.start_position(), 4);
  // Two "heads" recycle into disjoint offsets from the end pointer, then one commit.
  const std::int64_t end = list.end_position();  // (4 + 2) mod 6 = 0
  list.put_at(end + 0, 2);
  list.put_at(end + 1, 0);
  list.commit(0, 2);
  EXPECT_EQ(list.free_ids(), (std::vector<PageId>{4, 5, 2, 0}));
}

TEST(FreePageList, RecyclingMoreThanThePoolIsALogicError) {
  FreePageList list(2);
  const std::vector<PageId> extra{0};
  EXPECT_THROW(list.recycle(extra), std::logic_error);
}

TEST(FreePageList, RejectsAnEmptyPool) {
  EXPECT_THROW(FreePageList(0), InputError);
}

}  // namespace
}  // namespace kvcheck
