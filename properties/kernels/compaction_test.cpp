// The flat compaction round and its exclusive prefix sum (kernels/cpu/compaction.h and
// exclusive_scan.h, CPU twins of kernels/compaction_cuda.h): hand-computed cases, the wrap at the
// pool end, and the blocked parallel scan against std::exclusive_scan for every thread count.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/compaction.h"
#include "kernels/cpu/exclusive_scan.h"

namespace kvcheck {
namespace {

TEST(ExclusiveScan, HandComputedOffsets) {
  const std::vector<std::int64_t> counts{2, 0, 3, 1};
  std::vector<std::int64_t> offsets(4);
  EXPECT_EQ(kvcheck::exclusive_scan(counts, offsets), 6);
  EXPECT_EQ(offsets, (std::vector<std::int64_t>{0, 2, 2, 5}));
  std::vector<std::int64_t> none;
  EXPECT_EQ(kvcheck::exclusive_scan(none, none), 0);
}

TEST(ExclusiveScan, InPlace) {
  std::vector<std::int64_t> v{2, 0, 3, 1};
  EXPECT_EQ(kvcheck::exclusive_scan(v, v, 2, 1), 6);
  EXPECT_EQ(v, (std::vector<std::int64_t>{0, 2, 2, 5}));
}

TEST(ExclusiveScan, BlockedParallelScanEqualsTheSerialOne) {
  std::mt19937_64 rng(7);
  for (std::int64_t n : {1, 2, 3, 17, 1000, 100003}) {
    std::vector<std::int64_t> in(static_cast<std::size_t>(n));
    for (auto& x : in) x = static_cast<std::int64_t>(rng() % 5);
    std::vector<std::int64_t> want(in.size());
    std::exclusive_scan(in.begin(), in.end(), want.begin(), std::int64_t{0});
    const std::int64_t total = std::accumulate(in.begin(), in.end(), std::int64_t{0});
    for (int threads : {1, 2, 3, 8}) {
      std::vector<std::int64_t> out(in.size());
      EXPECT_EQ(kvcheck::exclusive_scan(in, out, threads, 1), total) << n << " " << threads;
      EXPECT_EQ(out, want) << n << " " << threads;
    }
  }
}

TEST(CompactIds, HandComputedRoundWrapsAtThePoolEnd) {
  // Pool of 8: list = 0..7; free run starts at position 6 with 4 free ids (6, 7, 0, 1),
  // so the end pointer is position 2 and ids 2..5 are used.
  std::vector<std::int32_t> list{0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<std::int64_t> alloc{2, 0, 1};    // offsets 0, 2, 2 from the start pointer
  const std::vector<std::int64_t> recycle{1, 2, 0};  // offsets 0, 1, 3 from the end pointer
  const std::vector<std::int32_t> freed{4, 2, 5};
  std::vector<std::int32_t> allocated(3);
  std::vector<std::int64_t> ao(3), ro(3);
  const CompactIdsResult r = compact_ids(list.data(), 8, {6, 4}, alloc.data(), recycle.data(), 3, freed.data(),
                                         allocated.data(), ao.data(), ro.data());
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(ao, (std::vector<std::int64_t>{0, 2, 2}));
  EXPECT_EQ(ro, (std::vector<std::int64_t>{0, 1, 3}));
  EXPECT_EQ(allocated, (std::vector<std::int32_t>{6, 7, 0}));  // head 0: 6, 7; head 2: 0 (wrapped)
  EXPECT_EQ(list, (std::vector<std::int32_t>{0, 1, 4, 2, 5, 5, 6, 7}));  // freed at positions 2, 3, 4
  EXPECT_EQ(r.run.start, 1);  // 6 + 3 wrapped
  EXPECT_EQ(r.run.free_count, 4);  // 4 - 3 + 3: the free run is positions 1..4 = 1, 4, 2, 5
}

TEST(CompactIds, RecyclingMoreIdsThanAreInUseIsRefused) {
  // Pool of 4, every id free: no head can return an id. Were 2 recycled ids accepted, their
  // writes at the end pointer would wrap onto [start, start + 2), which head 1 is reading in the
  // same round (a race on the GPU, where heads are thread blocks).
  std::vector<std::int32_t> list{0, 1, 2, 3};
  const std::vector<std::int32_t> before = list;
  const std::vector<std::int64_t> alloc{0, 2}, recycle{2, 0};
  const std::vector<std::int32_t> freed{0, 1};
  std::vector<std::int32_t> allocated(2);
  std::vector<std::int64_t> ao(2), ro(2);
  try {
    compact_ids(list.data(), 4, {0, 4}, alloc.data(), recycle.data(), 2, freed.data(), allocated.data(), ao.data(),
                ro.data());
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("2 recycled ids but only 0 of the pool's 4 are in use"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(list, before);
}

TEST(CompactIds, ExhaustionChangesNothing) {
  std::vector<std::int32_t> list{0, 1, 2};
  const std::vector<std::int32_t> before = list;
  const std::vector<std::int64_t> alloc{1, 1}, recycle{0, 0};
  std::vector<std::int32_t> allocated(2);
  std::vector<std::int64_t> ao(2), ro(2);
  const CompactIdsResult r = compact_ids(list.data(), 3, {2, 1}, alloc.data(), recycle.data(), 2, nullptr,
                                         allocated.data(), ao.data(), ro.data());
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.total_allocated, 2);
  EXPECT_EQ(r.run.start, 2);
  EXPECT_EQ(r.run.free_count, 1);
  EXPECT_EQ(list, before);
}

}  // namespace
}  // namespace kvcheck
