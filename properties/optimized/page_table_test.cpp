// The bidirectional page table: sides, the +1 of its length, overflow reported with the head.
#include <gtest/gtest.h>

#include <string>

#include "optimized/page_table.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

TEST(PageTable, LengthIsCeilOfMaxSeqLenOverHighTokensPlusOne) {
  EXPECT_EQ(PageTable::length_for(8, 2), 5);
  EXPECT_EQ(PageTable::length_for(9, 2), 6);
  EXPECT_EQ(PageTable::length_for(1, 4), 2);
  // M = 2, a = 2, b = 3, one high and one low token: ceil(1/2) + ceil(1/3) = 2 > ceil(2/2) = 1.
  EXPECT_EQ(PageTable::length_for(2, 2), 2);
  EXPECT_THROW(PageTable::length_for(0, 2), InputError);
  EXPECT_THROW(PageTable::length_for(8, 0), InputError);
}

TEST(PageTable, HighGrowsFromTheLeftLowFromTheRight) {
  PageTable t(HeadKey{3, 1, 0}, 5);
  t.push(kHighTier, 10);
  t.push(kHighTier, 11);
  t.push(kLowTier, 20);
  EXPECT_EQ(std::vector<PageId>(t.entries().begin(), t.entries().end()),
            (std::vector<PageId>{10, 11, kNoPage, kNoPage, 20}));
  t.push(kLowTier, 21);
  EXPECT_EQ(t.at(kLowTier, 0), 20);
  EXPECT_EQ(t.at(kLowTier, 1), 21);
  EXPECT_EQ(t.entries()[3], 21);
  EXPECT_EQ(t.room(), 1);
  EXPECT_EQ(t.pop(kHighTier), 11);
  EXPECT_EQ(t.pop(kLowTier), 21);
  EXPECT_EQ(std::vector<PageId>(t.entries().begin(), t.entries().end()),
            (std::vector<PageId>{10, kNoPage, kNoPage, kNoPage, 20}));
}

TEST(PageTable, OverflowIsReportedWithTheHeadBeforeAnythingChanges) {
  PageTable t(HeadKey{7, 2, 1}, 2);
  t.push(kHighTier, 1);
  t.push(kLowTier, 2);
  try {
    t.push(kHighTier, 3);
    FAIL() << "no error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("request 7, layer 2, head 1"), std::string::npos) << e.what();
  }
  EXPECT_EQ(t.count(kHighTier), 1);
  EXPECT_EQ(t.count(kLowTier), 1);
  EXPECT_THROW(t.require_room(1), InputError);
  EXPECT_NO_THROW(t.require_room(0));
}

}  // namespace
}  // namespace kvcheck
