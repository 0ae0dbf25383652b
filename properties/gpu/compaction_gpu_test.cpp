// The CUDA compaction round (CUB exclusive scan + id copy kernel) against the CPU twin
// kernels/cpu/compaction.h on random plans: identical offsets, allocated ids, list and free
// run, including wraps at the pool end and exhausted plans. Skips visibly without CUDA or a device.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/compaction_cuda.h"
#include "kernels/cpu/compaction.h"
#include "kernels/cpu/exclusive_scan.h"
#include "kernels/device.h"
#include "properties/support/gpu_skip.h"

namespace kvcheck {
namespace {


TEST(CompactionGpu, ExclusiveScanEqualsTheCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  std::mt19937_64 rng(11);
  for (std::int64_t n : {1, 4, 1000, 32768, 1 << 20}) {
    std::vector<std::int64_t> in(static_cast<std::size_t>(n)), cpu(in.size()), gpu(in.size());
    for (auto& x : in) x = static_cast<std::int64_t>(rng() % 4);
    const std::int64_t total = kvcheck::exclusive_scan(in, cpu, 2);
    EXPECT_EQ(exclusive_scan_cuda(in.data(), n, gpu.data()), total) << n;
    EXPECT_EQ(cpu, gpu) << n;
  }
}

TEST(CompactionGpu, RandomRoundsEqualTheCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    const std::int64_t pool = 1 + static_cast<std::int64_t>(rng() % (seed < 100 ? 64 : 100000));
    const std::int64_t heads = 1 + static_cast<std::int64_t>(rng() % (seed < 100 ? 16 : 40000));
    // A permuted list and a random free run; the used ids are the rest of the permutation.
    std::vector<std::int32_t> list(static_cast<std::size_t>(pool));
    std::iota(list.begin(), list.end(), 0);
    std::shuffle(list.begin(), list.end(), rng);
    FreeRun run{static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(pool)),
                static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(pool + 1))};
    std::vector<std::int32_t> used;
    for (std::int64_t i = run.free_count; i < pool; ++i) {
      used.push_back(list[static_cast<std::size_t>((run.start + i) % pool)]);
    }
    std::shuffle(used.begin(), used.end(), rng);
    // Counts: allocation sometimes over the free count (an exhausted plan), recycling within the used ids.
    std::vector<std::int64_t> ac(static_cast<std::size_t>(heads)), rc(static_cast<std::size_t>(heads));
    std::int64_t left = static_cast<std::int64_t>(used.size());
    const std::int64_t per_head = std::max<std::int64_t>(1, 2 * (run.free_count + 1) / heads);
    for (std::int64_t h = 0; h < heads; ++h) {
      ac[static_cast<std::size_t>(h)] = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(per_head + 1));
      const std::int64_t r = std::min<std::int64_t>(left, static_cast<std::int64_t>(rng() % 3));
      rc[static_cast<std::size_t>(h)] = r;
      left -= r;
    }
    const std::int64_t recycled = static_cast<std::int64_t>(used.size()) - left;
    const std::vector<std::int32_t> freed(used.begin(), used.begin() + recycled);
    const std::int64_t allocated = std::accumulate(ac.begin(), ac.end(), std::int64_t{0});
    std::vector<std::int32_t> list_cpu = list, list_gpu = list;
    std::vector<std::int32_t> alloc_cpu(static_cast<std::size_t>(allocated)), alloc_gpu(alloc_cpu.size());
    std::vector<std::int64_t> ao_cpu(ac.size()), ao_gpu(ac.size()), ro_cpu(ac.size()), ro_gpu(ac.size());
    const CompactIdsResult c = compact_ids(list_cpu.data(), pool, run, ac.data(), rc.data(), heads, freed.data(),
                                           alloc_cpu.data(), ao_cpu.data(), ro_cpu.data(), 2);
    const CompactIdsResult g = compact_ids_cuda(list_gpu.data(), pool, run, ac.data(), rc.data(), heads, freed.data(),
                                                alloc_gpu.data(), ao_gpu.data(), ro_gpu.data());
    const std::string what = "seed " + std::to_string(seed);
    ASSERT_EQ(c.ok, g.ok) << what;
    EXPECT_EQ(c.total_allocated, g.total_allocated) << what;
    EXPECT_EQ(c.total_recycled, g.total_recycled) << what;
    EXPECT_EQ(ao_cpu, ao_gpu) << what;
    EXPECT_EQ(ro_cpu, ro_gpu) << what;
    EXPECT_EQ(c.run.start, g.run.start) << what;
    EXPECT_EQ(c.run.free_count, g.run.free_count) << what;
    EXPECT_EQ(list_cpu, list_gpu) << what;
    if (c.ok) {
      EXPECT_EQ(alloc_cpu, alloc_gpu) << what;
    }
  }
}

}  // namespace
}  // namespace kvcheck
