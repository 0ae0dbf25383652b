// Paged decode attention against the per-step oracle: for random heads, GQA groups, tier mixes,
// awkward page sizes (1, 3, 7, 16 tokens where the layout allows), random live masks and fp16
// residual tokens, the kernel reading real pages (built by optimized/page_pool.h, poisoned with
// 0xFF where free or dead) equals exact double attention over the dequantized live tokens
// (oracles/retained_attention.h), within the float tolerance derived in
// properties/support/decode_cases.cpp.
//   RC_PARAMS="seed=7 max_success=20000" build-attn/properties/kvcheck_property_tests --gtest_filter='PagedAttentionProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "reference/errors.h"
#include "properties/support/decode_cases.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;

constexpr int kGateCases = 1000;
using testing::DecodeCase;
using testing::kFloatEps;
using testing::kProbUnderflow;

DecodeCase draw_case() { return testing::draw_decode_case(); }
testing::DecodeTolerance tolerance(const DecodeCase& c, std::int64_t g) { return testing::decode_tolerance(c, g); }
RetainedAttentionRef run_oracle(const DecodeCase& c) { return testing::decode_oracle(c); }

struct KernelRun {
  std::vector<float> out, probs;
};

KernelRun run_kernel(const DecodeCase& c, bool with_probs) {
  KernelRun r;
  r.out.assign(static_cast<std::size_t>(c.group * c.head_dim), -1.0f);
  if (with_probs) r.probs.assign(static_cast<std::size_t>(c.group * c.slots), -1.0f);
  paged_decode_attention(c.input(), DecodeHeadOutput{r.out, r.probs});
  return r;
}

TEST(PagedAttentionProps, OutputMatchesRetainedOracle) {
  check_property("paged decode attention/output vs retained oracle", kGateCases, [] {
    const DecodeCase c = draw_case();
    RC_ASSERT(decode_slots(c.input()) == c.slots);
    const KernelRun with = run_kernel(c, true);
    const KernelRun without = run_kernel(c, false);
    // Asking for probabilities must not change the output, bit for bit.
    RC_ASSERT(std::memcmp(with.out.data(), without.out.data(), with.out.size() * sizeof(float)) == 0);
    const RetainedAttentionRef ref = run_oracle(c);
    for (std::int64_t g = 0; g < c.group; ++g) {
      const testing::DecodeTolerance tol = tolerance(c, g);
      for (std::int64_t ch = 0; ch < c.head_dim; ++ch) {
        const auto at = static_cast<std::size_t>(g * c.head_dim + ch);
        // Dead slots hold NaN poison: any read of one would show here.
        RC_ASSERT(std::isfinite(with.out[at]));
        if (std::fabs(with.out[at] - ref.out[at]) > tol.out) {
          RC_FAIL("head " + std::to_string(g) + ", channel " + std::to_string(ch) + ": kernel " +
                  std::to_string(with.out[at]) + ", oracle " + std::to_string(ref.out[at]) + ", tolerance " +
                  std::to_string(tol.out) + " (" + c.summary + ")");
        }
      }
    }
  });
}

TEST(PagedAttentionProps, ProbsMatchOracleAtLiveSlots) {
  check_property("paged decode attention/probs vs retained oracle", kGateCases, [] {
    const DecodeCase c = draw_case();
    const KernelRun k = run_kernel(c, true);
    const RetainedAttentionRef ref = run_oracle(c);
    const auto n = static_cast<std::size_t>(c.live());
    std::vector<bool> live(static_cast<std::size_t>(c.slots), false);
    for (std::int64_t j : c.live_walk_index) live[static_cast<std::size_t>(j)] = true;
    for (std::int64_t g = 0; g < c.group; ++g) {
      const testing::DecodeTolerance tol = tolerance(c, g);
      const float* p = k.probs.data() + g * c.slots;
      double sum = 0.0;
      for (std::int64_t j = 0; j < c.slots; ++j) {
        RC_ASSERT(std::isfinite(p[j]));
        sum += p[j];
        if (!live[static_cast<std::size_t>(j)]) RC_ASSERT(p[j] == 0.0f);  // dead slots: exactly 0
      }
      RC_ASSERT(std::fabs(sum - 1.0) <= (4.0 * static_cast<double>(n) + 16.0) * kFloatEps);
      for (std::size_t r = 0; r < n; ++r) {
        const double want = ref.probs[static_cast<std::size_t>(g) * n + r];
        const double got = p[c.live_walk_index[r]];
        if (std::fabs(got - want) > tol.prob_rel * want + kProbUnderflow) {
          RC_FAIL("head " + std::to_string(g) + ", live token " + std::to_string(r) + " (walk slot " +
                  std::to_string(c.live_walk_index[r]) + "): kernel " + std::to_string(got) + ", oracle " +
                  std::to_string(want) + " (" + c.summary + ")");
        }
      }
    }
  });
}

// Stronger than poison: whatever a dead slot holds (here: random codes and metadata, finite or
// not), the result is the same bit for bit. A kernel that read a dead slot and then multiplied
// its weight by zero would pass a NaN check on luck alone; this one it would not.
TEST(PagedAttentionProps, DeadSlotContentsAreNeverRead) {
  check_property("paged decode attention/dead slots never read", kGateCases / 2, [] {
    DecodeCase c = draw_case();
    const KernelRun before = run_kernel(c, true);
    std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
    std::int64_t scribbled = 0;
    for (std::size_t p = 0; p < c.walk.size(); ++p) {
      const PageId id = c.walk[p];
      const int tier = c.pool.owner(id).tier;
      for (std::int64_t s = 0; s < c.pool.tokens_per_page(tier); ++s) {
        if (c.pool.live(id, s)) continue;
        PagePool::SlotCodes junk = c.pool.empty_codes(tier);
        for (auto* v : {&junk.key, &junk.key_meta, &junk.value, &junk.value_meta}) {
          for (std::uint8_t& b : *v) b = static_cast<std::uint8_t>(rng());
        }
        // FP8's slot metadata is the page's one scale, shared with the live slots: kept.
        const PagePool::SlotCodes now = c.pool.load_codes(id, s);
        const KvTier& t = c.pool.config().tiers[static_cast<std::size_t>(tier)];
        if (t.key.dtype == KvDType::kFp8E4M3) junk.key_meta = now.key_meta;
        if (t.value.dtype == KvDType::kFp8E4M3) junk.value_meta = now.value_meta;
        c.pool.store_codes(id, s, junk);
        ++scribbled;
      }
    }
    RC_CLASSIFY(scribbled > 0, "dead slots scribbled");
    const KernelRun after = run_kernel(c, true);
    RC_ASSERT(std::memcmp(before.out.data(), after.out.data(), before.out.size() * sizeof(float)) == 0);
    RC_ASSERT(std::memcmp(before.probs.data(), after.probs.data(), before.probs.size() * sizeof(float)) == 0);
  });
}

}  // namespace
}  // namespace kvcheck
