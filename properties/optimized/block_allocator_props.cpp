// Stateful properties of the vLLM-style block allocator (optimized/block_allocator.h) against the
// plain model (oracles/block_allocator_model.h): admit (prefix-cache insert and hits), decode
// steps with evictions, finish, preempt, fork, copy-on-write writes and prefix lookups, with the
// whole state checked after every command (properties/optimized/block_allocator_harness.h). The
// prefix cache runs with 2-bit hash buckets so that chain-hash collisions are common and must
// never return a wrong block.
//
// The gate runs kCases stateful runs per configuration (fixed seed, see property_main.cc) and
// requires at least 500 sequences that reach 100 tokens over the configurations. The long run:
//   RC_PARAMS="seed=20261123 max_success=20000" build-blocks/properties/kvcheck_property_tests --gtest_filter='BlockAllocatorProps.*:SlotStrategyProps.*'
#include <gtest/gtest.h>

#include "properties/optimized/block_allocator_harness.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::HarnessConfig;

constexpr int kCases = 300;

void check_allocator(const std::string& id, const HarnessConfig& config) {
  using namespace testing;
  check_property(id, kCases, [config] {
    run_harness<Admit, Admit, Decode, Decode, Decode, Finish, Preempt, Fork, Fork, CowWrite, CowWrite, PrefixLookup>(
        config);
  });
}

TEST(BlockAllocatorProps, MatchesModelUnderEveryCommand) {
  testing::reset_coverage();
  HarnessConfig c;
  c.blocks = 96;
  c.block_size = 4;
  c.hash_bits = 2;
  c.strategy = SlotStrategy::kNoOp;
  c.budget = 1 << 20;  // no evictions: the plain allocator
  check_allocator("allocator/bs4/hash2/no-evict", c);
  c.budget = 48;
  check_allocator("allocator/bs4/hash2/no-op", c);
  c.block_size = 16;
  c.blocks = 24;
  c.hash_bits = 64;
  c.strategy = SlotStrategy::kFreeBlock;
  check_allocator("allocator/bs16/hash64/free-block", c);
  c.block_size = 1;
  c.blocks = 160;
  c.hash_bits = 1;
  c.strategy = SlotStrategy::kSlotReuse;
  c.max_prompt = 40;
  check_allocator("allocator/bs1/hash1/slot-reuse", c);
  std::printf("%s\n", ("BlockAllocatorProps: " + testing::coverage_line()).c_str());
  EXPECT_GE(testing::long_sequences().load(), 500);
}

}  // namespace
}  // namespace kvcheck
