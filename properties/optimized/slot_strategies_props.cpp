// Stateful properties of SpvLLM's four slot strategies (optimized/slot_strategies.h) on the block
// allocator, against the plain model (oracles/block_allocator_model.h): decode-heavy command
// sequences (each step appends one token and evicts one drawn victim once the sequence holds more
// live tokens than its budget), with admits, forks, copy-on-write writes, finishes, preemptions
// and prefix lookups mixed in; the whole state (tables, masks, payloads, poison, refcounts, LRU,
// cache, copy volume) is checked after every command (block_allocator_harness.h).
//
// The gate runs kCases stateful runs per strategy (fixed seed) and requires at least 500
// sequences that reach 100 tokens. The long run:
//   RC_PARAMS="seed=20261123 max_success=20000" build-blocks/properties/kvcheck_property_tests --gtest_filter='BlockAllocatorProps.*:SlotStrategyProps.*'
#include <gtest/gtest.h>

#include "properties/optimized/block_allocator_harness.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::HarnessConfig;

constexpr int kCases = 300;

TEST(SlotStrategyProps, EveryStrategyMatchesModel) {
  using namespace testing;
  reset_coverage();
  for (const SlotStrategy strategy : kAllSlotStrategies) {
    HarnessConfig c;
    c.blocks = 80;
    c.block_size = 4;
    c.hash_bits = 3;
    c.strategy = strategy;
    c.budget = 40;
    c.max_prompt = 130;
    c.max_steps = 32;
    check_property("slots/" + slot_strategy_name(strategy), kCases, [c] {
      run_harness<Admit, Decode, Decode, Decode, Decode, Decode, Finish, Preempt, Fork, CowWrite, PrefixLookup>(c);
    });
  }
  std::printf("%s\n", ("SlotStrategyProps: " + coverage_line()).c_str());
  EXPECT_GE(long_sequences().load(), 500);
}

}  // namespace
}  // namespace kvcheck
