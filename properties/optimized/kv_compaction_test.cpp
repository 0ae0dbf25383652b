// Planning and coordination of KV compaction: hand-computed head plans, and one round whose
// ids wrap at the pool end, the same in parallel and sequential mode.
#include <gtest/gtest.h>

#include <vector>

#include "optimized/free_page_list.h"
#include "optimized/kv_compaction.h"
#include "optimized/pool_exhausted.h"

namespace kvcheck {
namespace {

TEST(KvCompactionPlan, PerTierAndConvertible) {
  // Prompt of 8 tokens, 2 per high page, 4 per low page (LeanKV figure 5): 4 pages held.
  const TierDemand head1[2] = {{2, 4, 2}, {3, 0, 4}};  // 1 high page, 1 low page
  EXPECT_EQ(plan_head(head1, true), (HeadPlan{0, 2}));
  EXPECT_EQ(plan_head(head1, false), (HeadPlan{1, 3}));
  const TierDemand head2[2] = {{4, 4, 2}, {4, 0, 4}};  // 2 high, 1 low
  EXPECT_EQ(plan_head(head2, true), (HeadPlan{0, 1}));
  // The +1 case: 2-token prompt, 1 high + 1 low token, a = 2, b = 3: one page held, two needed.
  const TierDemand tight[2] = {{1, 1, 2}, {1, 0, 3}};
  EXPECT_EQ(plan_head(tight, true), (HeadPlan{1, 0}));
  EXPECT_EQ(pages_for(0, 4), 0);
  EXPECT_EQ(pages_for(5, 4), 2);
}

// Pool of 6 with the free run at positions 4, 5, 0 (start 4): heads ask {1, 0, 2} and return
// {0, 2, 1} ids.
struct Round {
  FreePageList list{6};
  std::vector<std::vector<PageId>> got{3};
  Round() {
    list.allocate(4);                 // ids 0..3 used, free 4, 5
    const std::vector<PageId> r{0};
    list.recycle(r);                  // position 0 now holds 0: free run 4, 5, 0 from position 4
    list.allocate(0);
  }
  void run(CompactionMode mode) {
    const std::vector<std::int64_t> alloc{1, 0, 2}, recycle{0, 2, 1};
    const std::vector<std::vector<PageId>> freed{{}, {1, 2}, {3}};
    CompactionOptions o;
    o.mode = mode;
    o.threads = 3;
    o.min_parallel = 1;
    compaction_round(list, alloc, recycle, o, [&](std::int64_t h, std::int64_t a, std::int64_t r) {
      const auto k = static_cast<std::size_t>(h);
      for (std::int64_t i = 0; i < alloc[k]; ++i) got[k].push_back(list.id_at(a + i));
      for (std::size_t j = 0; j < freed[k].size(); ++j) list.put_at(r + static_cast<std::int64_t>(j), freed[k][j]);
    });
  }
};

TEST(KvCompaction, ParallelAndSequentialGiveTheSameIdsAcrossTheWrap) {
  for (CompactionMode mode : {CompactionMode::kParallel, CompactionMode::kSequential}) {
    Round r;
    ASSERT_EQ(r.list.free_ids(), (std::vector<PageId>{4, 5, 0}));
    r.run(mode);
    EXPECT_EQ(r.got[0], (std::vector<PageId>{4}));
    EXPECT_TRUE(r.got[1].empty());
    EXPECT_EQ(r.got[2], (std::vector<PageId>{5, 0}));  // wraps from position 5 to 0
    EXPECT_EQ(r.list.start_position(), 1);
    EXPECT_EQ(r.list.free_ids(), (std::vector<PageId>{1, 2, 3}));  // written at the end pointer, 1..3
  }
}

TEST(KvCompaction, ExhaustionThrowsBeforeAnyHeadRuns) {
  for (CompactionMode mode : {CompactionMode::kParallel, CompactionMode::kSequential}) {
    FreePageList list(3);
    const std::vector<std::int64_t> alloc{2, 2}, recycle{0, 0};
    CompactionOptions o;
    o.mode = mode;
    bool called = false;
    EXPECT_THROW(compaction_round(list, alloc, recycle, o, [&](std::int64_t, std::int64_t, std::int64_t) { called = true; }),
                 PoolExhausted);
    EXPECT_FALSE(called);
    EXPECT_EQ(list.free_count(), 3);
    EXPECT_EQ(list.start_position(), 0);
  }
}

}  // namespace
}  // namespace kvcheck
