// The CUDA paged decode attention against its CPU twin and the double oracle, on the same real
// pages (properties/support/decode_cases.h: every tier mix, awkward page sizes, dead slots holding
// NaN poison, fp16 residual tokens, GQA groups up to 16, head_dim up to 256). Skips visibly
// without CUDA or without a device.
//   RC_PARAMS="seed=7 max_success=5000" build/properties/kvcheck_gpu_tests --gtest_filter='PagedAttentionGpu.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/paged_attention_cuda.h"
#include "kernels/paged_attention_cuda_adapter.h"
#include "properties/support/decode_cases.h"
#include "properties/support/gpu_skip.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::DecodeCase;

constexpr int kCases = 400;

struct AttentionRun {
  std::vector<float> out, probs;
};

// split_slots as paged_decode_attention_cuda: 0 the split path at the head's own size, N forced
// splits of at most N walk indices, -1 the one-block-per-head kernel.
AttentionRun run(const DecodeCase& c, bool gpu, std::int64_t split_slots = 0) {
  AttentionRun r;
  r.out.assign(static_cast<std::size_t>(c.group * c.head_dim), -1.0f);
  r.probs.assign(static_cast<std::size_t>(c.group * c.slots), -1.0f);
  const DecodeHeadInput in = c.input();
  const DecodeHeadOutput out{r.out, r.probs};
  if (gpu) {
    paged_decode_attention_cuda(std::span<const DecodeHeadInput>(&in, 1), std::span<const DecodeHeadOutput>(&out, 1),
                                split_slots);
  } else {
    paged_decode_attention(in, out);
  }
  return r;
}

TEST(PagedAttentionGpu, MatchesOracleAndCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  check_property("paged decode attention/GPU vs oracle and CPU twin", kCases, [] {
    const DecodeCase c = testing::draw_decode_case(kCudaDecodeMaxHeadDim, kCudaDecodeMaxGroup);
    const std::int64_t split_slots = *rc::gen::element<std::int64_t>(-1, 0, 1, 3, 16);
    const AttentionRun gpu = run(c, true, split_slots);
    const AttentionRun cpu = run(c, false);
    const RetainedAttentionRef ref = testing::decode_oracle(c);
    const auto n = static_cast<std::size_t>(c.live());
    std::vector<bool> live(static_cast<std::size_t>(c.slots), false);
    for (std::int64_t j : c.live_walk_index) live[static_cast<std::size_t>(j)] = true;
    for (std::int64_t g = 0; g < c.group; ++g) {
      const testing::DecodeTolerance tol = testing::decode_tolerance(c, g);
      for (std::int64_t ch = 0; ch < c.head_dim; ++ch) {
        const auto at = static_cast<std::size_t>(g * c.head_dim + ch);
        RC_ASSERT(std::isfinite(gpu.out[at]));  // a read of a poisoned dead slot would show here
        // Each kernel is within tol.out of the oracle, so of each other within twice that.
        if (std::fabs(gpu.out[at] - ref.out[at]) > tol.out || std::fabs(gpu.out[at] - cpu.out[at]) > 2.0 * tol.out) {
          RC_FAIL("head " + std::to_string(g) + ", channel " + std::to_string(ch) + ": GPU " +
                  std::to_string(gpu.out[at]) + ", CPU " + std::to_string(cpu.out[at]) + ", oracle " +
                  std::to_string(ref.out[at]) + ", tolerance " + std::to_string(tol.out) + ", split_slots " +
                  std::to_string(split_slots) + " (" + c.summary + ")");
        }
      }
      const float* p = gpu.probs.data() + g * c.slots;
      for (std::int64_t j = 0; j < c.slots; ++j) {
        if (!live[static_cast<std::size_t>(j)]) RC_ASSERT(p[j] == 0.0f);  // dead slots: exactly 0
      }
      for (std::size_t r = 0; r < n; ++r) {
        const double want = ref.probs[static_cast<std::size_t>(g) * n + r];
        const double got = p[c.live_walk_index[r]];
        if (std::fabs(got - want) > tol.prob_rel * want + testing::kProbUnderflow) {
          RC_FAIL("head " + std::to_string(g) + ", live token " + std::to_string(r) + ": GPU prob " +
                  std::to_string(got) + ", oracle " + std::to_string(want) + ", split_slots " +
                  std::to_string(split_slots) + " (" + c.summary + ")");
        }
      }
    }
  });
}

// A batch of heads in one launch gives each head what it gets alone, bit for bit: blocks share
// nothing but the scratch, each at its own offset.
TEST(PagedAttentionGpu, BatchEqualsHeadsAlone) {
  KVCHECK_REQUIRE_GPU();
  check_property("paged decode attention/GPU batch = heads alone", kCases / 4, [] {
    const int heads = *rc::gen::inRange(2, 9);
    std::vector<DecodeCase> cases;
    cases.reserve(static_cast<std::size_t>(heads));
    for (int i = 0; i < heads; ++i) cases.push_back(testing::draw_decode_case(kCudaDecodeMaxHeadDim, kCudaDecodeMaxGroup));
    std::vector<DecodeHeadInput> in;
    std::vector<AttentionRun> batched(cases.size());
    std::vector<DecodeHeadOutput> out;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      in.push_back(cases[i].input());
      batched[i].out.assign(static_cast<std::size_t>(cases[i].group * cases[i].head_dim), -1.0f);
      // Every other head without probabilities: the descriptors' -1 must hold.
      if (i % 2 == 0) batched[i].probs.assign(static_cast<std::size_t>(cases[i].group * cases[i].slots), -1.0f);
      out.push_back(DecodeHeadOutput{batched[i].out, batched[i].probs});
    }
    paged_decode_attention_cuda(in, out);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const AttentionRun alone = run(cases[i], true);
      RC_ASSERT(std::memcmp(alone.out.data(), batched[i].out.data(), alone.out.size() * sizeof(float)) == 0);
      if (i % 2 == 0) {
        RC_ASSERT(std::memcmp(alone.probs.data(), batched[i].probs.data(), alone.probs.size() * sizeof(float)) == 0);
      }
    }
  });
}

// Whatever a dead slot holds, the GPU result is the same bit for bit (as the CPU twin's property).
TEST(PagedAttentionGpu, DeadSlotContentsAreNeverRead) {
  KVCHECK_REQUIRE_GPU();
  check_property("paged decode attention/GPU dead slots never read", kCases / 4, [] {
    DecodeCase c = testing::draw_decode_case(kCudaDecodeMaxHeadDim, kCudaDecodeMaxGroup);
    const std::int64_t split_slots = *rc::gen::element<std::int64_t>(-1, 0, 3);
    const AttentionRun before = run(c, true, split_slots);
    std::mt19937_64 rng(*rc::gen::arbitrary<std::uint64_t>());
    for (const PageId id : c.walk) {
      const int tier = c.pool.owner(id).tier;
      const KvTier& t = c.pool.config().tiers[static_cast<std::size_t>(tier)];
      for (std::int64_t s = 0; s < c.pool.tokens_per_page(tier); ++s) {
        if (c.pool.live(id, s)) continue;
        PagePool::SlotCodes junk = c.pool.empty_codes(tier);
        for (auto* v : {&junk.key, &junk.key_meta, &junk.value, &junk.value_meta}) {
          for (std::uint8_t& b : *v) b = static_cast<std::uint8_t>(rng());
        }
        const PagePool::SlotCodes now = c.pool.load_codes(id, s);
        if (t.key.dtype == KvDType::kFp8E4M3) junk.key_meta = now.key_meta;  // the page's shared scale
        if (t.value.dtype == KvDType::kFp8E4M3) junk.value_meta = now.value_meta;
        c.pool.store_codes(id, s, junk);
      }
    }
    const AttentionRun after = run(c, true, split_slots);
    RC_ASSERT(std::memcmp(before.out.data(), after.out.data(), before.out.size() * sizeof(float)) == 0);
    RC_ASSERT(std::memcmp(before.probs.data(), after.probs.data(), before.probs.size() * sizeof(float)) == 0);
  });
}

TEST(PagedAttentionGpu, ShapesBeyondTheKernelAreRefusedByName) {
  KVCHECK_REQUIRE_GPU();
  CudaHeadDesc head;
  head.head_dim = kCudaDecodeMaxHeadDim * 2;
  head.group = 1;
  CudaDecodeBatch batch;
  batch.heads = &head;
  batch.head_count = 1;
  try {
    paged_decode_attention_cuda_host(batch);
    FAIL() << "a head_dim over the limit was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("head_dim 512"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace kvcheck
