// The CUDA decode batch builder (kernels/paged_attention_cuda_adapter.h), on the host: every page's
// bytes and live words land where its descriptor says, 16-byte aligned; heads, tiers, residuals,
// queries, outputs and scratch get disjoint consecutive ranges; outputs scatter back to their
// heads; a bad head is refused by index before anything is gathered. The split path's plan cuts
// every head's walk into consecutive runs that cover it once, each starting in the page it names,
// and leaves the heads it cannot read (and only those) to the one-block kernel.
// Needs no GPU.
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/paged_attention_cuda_adapter.h"
#include "properties/support/decode_cases.h"
#include "properties/support/property_check.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::DecodeCase;

struct Outputs {
  std::vector<std::vector<float>> out, probs;
  std::vector<DecodeHeadOutput> views;
};

// memcmp with the builder's pointers: a range with no bytes may be null (the builder hands out
// null for an empty array), and memcmp must never be given a null pointer, even for zero bytes.
bool same_bytes(const void* a, const void* b, std::size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

Outputs make_outputs(const std::vector<DecodeCase>& cases) {
  Outputs o;
  o.out.resize(cases.size());
  o.probs.resize(cases.size());
  for (std::size_t i = 0; i < cases.size(); ++i) {
    o.out[i].assign(static_cast<std::size_t>(cases[i].group * cases[i].head_dim), 0.0f);
    if (i % 2 == 1) o.probs[i].assign(static_cast<std::size_t>(cases[i].group * cases[i].slots), 0.0f);
  }
  for (std::size_t i = 0; i < cases.size(); ++i) o.views.push_back(DecodeHeadOutput{o.out[i], o.probs[i]});
  return o;
}

// `heads` drawn decode cases (inside a property).
std::vector<DecodeCase> draw_cases(int heads) {
  std::vector<DecodeCase> cases;
  cases.reserve(static_cast<std::size_t>(heads));
  for (int i = 0; i < heads; ++i) cases.push_back(testing::draw_decode_case());
  return cases;
}

std::vector<DecodeHeadInput> inputs_of(const std::vector<DecodeCase>& cases) {
  std::vector<DecodeHeadInput> in;
  for (const DecodeCase& c : cases) in.push_back(c.input());
  return in;
}

TEST(CudaDecodeBatch, GathersEveryHeadWhereItsDescriptorsSay) {
  testing::check_property("CUDA decode batch/gather", 200, [] {
    const int heads = *rc::gen::inRange(1, 6);
    const std::vector<DecodeCase> cases = draw_cases(heads);
    const std::vector<DecodeHeadInput> in = inputs_of(cases);
    Outputs o = make_outputs(cases);
    const CudaDecodeBatchHost host(in, o.views);
    const CudaDecodeBatch& b = host.batch();
    RC_ASSERT(b.head_count == heads);
    std::int64_t scratch = 0, out = 0, probs = 0, q = 0, residual = 0;
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const DecodeCase& c = cases[i];
      const CudaHeadDesc& h = b.heads[i];
      RC_ASSERT(h.head_dim == c.head_dim && h.group == c.group && h.scale == c.scale && h.slots == c.slots);
      RC_ASSERT(h.scratch == scratch && h.out == out && h.q == q && h.residual == residual);
      RC_ASSERT(h.probs == (i % 2 == 1 ? probs : -1));
      RC_ASSERT(same_bytes(b.q + h.q, c.q.data(), c.q.size() * sizeof(float)));
      RC_ASSERT(h.residual_tokens == c.residual_tokens);
      RC_ASSERT(same_bytes(b.residual_keys + h.residual, c.residual_keys.data(), c.residual_keys.size() * 2));
      RC_ASSERT(same_bytes(b.residual_values + h.residual, c.residual_values.data(), c.residual_values.size() * 2));
      RC_ASSERT(h.pages == static_cast<std::int64_t>(c.page_reads.size()));
      for (std::size_t p = 0; p < c.page_reads.size(); ++p) {
        const CudaPageDesc& pd = b.page_descs[h.first_page + static_cast<std::int64_t>(p)];
        const PageRead& page = c.page_reads[p];
        const TierRead& tier = c.tier_reads[static_cast<std::size_t>(page.tier)];
        const CudaTierDesc& td = b.tiers[h.tiers + pd.tier];
        RC_ASSERT(pd.tier == page.tier);
        RC_ASSERT(pd.bytes % 16 == 0);
        RC_ASSERT(pd.bytes + tier.layout.used_bytes <= b.page_bytes);
        RC_ASSERT(same_bytes(b.pages + pd.bytes, page.bytes, static_cast<std::size_t>(tier.layout.used_bytes)));
        const std::int64_t words = (tier.layout.tokens + 63) / 64;
        RC_ASSERT(pd.live + words <= b.live_words);
        RC_ASSERT(same_bytes(b.live + pd.live, page.live.data(), static_cast<std::size_t>(words) * 8));
        RC_ASSERT(td.tokens == tier.layout.tokens && td.key_codes == tier.layout.key_codes.offset &&
                  td.key_meta == tier.layout.key_meta.offset && td.value_codes == tier.layout.value_codes.offset &&
                  td.value_meta == tier.layout.value_meta.offset);
        RC_ASSERT(td.key.vec == tier.key_tiling.vec && td.key.tile_group == tier.key_tiling.group &&
                  td.value.vec == tier.value_tiling.vec && td.value.tile_group == tier.value_tiling.group &&
                  td.key.unit_bytes == tier.key_tiling.unit_bytes);
        RC_ASSERT(td.key.dtype == static_cast<int>(tier.tier.key.dtype) &&
                  td.value.bits == tier.tier.value.spec.bits && td.key.group == tier.tier.key.spec.group);
      }
      scratch += c.group * c.slots;
      out += c.group * c.head_dim;
      q += c.group * c.head_dim;
      residual += c.residual_tokens * c.head_dim;
      if (i % 2 == 1) probs += c.group * c.slots;
    }
    RC_ASSERT(b.scratch_elements == scratch && b.out_elements == out && b.probs_elements == probs);

    // What the kernel would write comes back to the right head.
    for (std::int64_t k = 0; k < b.out_elements; ++k) b.out[k] = static_cast<float>(k);
    for (std::int64_t k = 0; k < b.probs_elements; ++k) b.probs[k] = static_cast<float>(-k);
    host.scatter(o.views);
    for (std::size_t i = 0; i < cases.size(); ++i) {
      const CudaHeadDesc& h = b.heads[i];
      RC_ASSERT(o.out[i].front() == static_cast<float>(h.out));
      RC_ASSERT(o.out[i].back() == static_cast<float>(h.out + static_cast<std::int64_t>(o.out[i].size()) - 1));
      if (i % 2 == 1) RC_ASSERT(o.probs[i].front() == static_cast<float>(-h.probs));
    }
  });
}

// The bytes a split of walk indices [begin, end) of head h stages in shared memory: page_stage of
// the slots it covers in each page, found afresh from the walk.
std::int64_t staged_bytes(const CudaDecodeBatch& b, const CudaHeadDesc& h, std::int64_t begin, std::int64_t end) {
  std::int64_t bytes = 0, walk = 0;
  for (std::int64_t p = 0; p < h.pages; ++p) {
    const CudaTierDesc& t = b.tiers[h.tiers + b.page_descs[h.first_page + p].tier];
    const std::int64_t lo = std::clamp<std::int64_t>(begin - walk, 0, t.tokens);
    const std::int64_t hi = std::clamp<std::int64_t>(end - walk, 0, t.tokens);
    if (lo < hi) bytes += page_stage(t, lo, hi).end;
    walk += t.tokens;
  }
  return bytes;
}

TEST(CudaDecodeBatch, SplitPlanCoversEveryWalkIndexOnceFromTheRightPage) {
  testing::check_property("CUDA decode batch/split plan", 200, [] {
    const int heads = *rc::gen::inRange(1, 6);
    const std::int64_t split_slots = *rc::gen::element<std::int64_t>(0, 1, 2, 5, 16, 1000);
    const std::vector<DecodeCase> cases = draw_cases(heads);
    const std::vector<DecodeHeadInput> in = inputs_of(cases);
    Outputs o = make_outputs(cases);
    const CudaDecodeBatchHost host(in, o.views);
    const CudaDecodeBatch& b = host.batch();
    const CudaDecodePlan plan = plan_decode_splits(b, split_slots);
    RC_ASSERT(static_cast<std::int64_t>(plan.heads.size()) == b.head_count);
    std::int64_t partial = 0, next_split = 0, one_block = 0;
    for (std::int64_t i = 0; i < b.head_count; ++i) {
      const CudaHeadDesc& h = plan.heads[static_cast<std::size_t>(i)];
      bool readable = true;  // every tier of the head's pages is one the split kernel reads
      for (std::int64_t p = 0; p < h.pages; ++p) {
        readable = readable && split_kernel_reads(b.tiers[h.tiers + b.page_descs[h.first_page + p].tier]);
      }
      RC_ASSERT(h.first_split == next_split);
      if (!readable) {  // the one-block kernel's head, in the same call
        RC_ASSERT(h.split_count == 0);
        ++one_block;
        continue;
      }
      if (h.split_count == 0) {  // readable, but a split of its size would not fit the shared memory
        if (split_slots > 0) {
          const std::int64_t per = std::min(split_slots, kCudaDecodeMaxSplitSlots);
          std::int64_t most = 0;
          for (std::int64_t begin = 0; begin < h.slots; begin += per) {
            most = std::max(most, staged_bytes(b, h, begin, std::min(h.slots, begin + per)));
          }
          RC_ASSERT(most > kCudaDecodeMaxStageBytes);
        }
        ++one_block;
        continue;
      }
      RC_ASSERT(h.split_count >= 1 && plan.split_group >= h.group);
      std::int64_t walk = 0;
      for (std::int64_t k = 0; k < h.split_count; ++k) {
        const CudaSplitDesc& s = plan.splits[static_cast<std::size_t>(h.first_split + k)];
        RC_ASSERT(s.head == i && s.begin == walk && s.end > s.begin);
        RC_ASSERT(s.end - s.begin <= (split_slots > 0 ? std::min(split_slots, kCudaDecodeMaxSplitSlots)
                                                      : kCudaDecodeMaxSplitSlots));
        // The page it names starts at page_walk and holds `begin` (or, past every page, residual rows).
        std::int64_t page_walk = 0;
        for (std::int64_t p = 0; p < s.page; ++p) page_walk += b.tiers[h.tiers + b.page_descs[h.first_page + p].tier].tokens;
        RC_ASSERT(s.page_walk == page_walk && s.begin >= page_walk);
        if (s.page < h.pages) {
          RC_ASSERT(s.begin < page_walk + b.tiers[h.tiers + b.page_descs[h.first_page + s.page].tier].tokens);
        } else {
          RC_ASSERT(s.begin >= h.slots - h.residual_tokens);
        }
        RC_ASSERT(s.partial == partial);
        const std::int64_t staged = staged_bytes(b, h, s.begin, s.end);  // what the kernel copies in
        RC_ASSERT(staged <= plan.stage_bytes && plan.stage_bytes <= kCudaDecodeMaxStageBytes);
        partial += h.group * (2 + h.head_dim);
        walk = s.end;
      }
      RC_ASSERT(walk == h.slots);
      next_split += h.split_count;
    }
    RC_ASSERT(next_split == static_cast<std::int64_t>(plan.splits.size()) && plan.partial_elements == partial);
    RC_ASSERT(plan.one_block_heads == one_block && plan.split == (one_block < b.head_count));
    RC_ASSERT(plan.split_group == 1 || plan.split_group == 2 || plan.split_group == 4 || plan.split_group == 8 ||
              plan.split_group == 16);
  });
}

TEST(CudaDecodeBatch, ABadHeadIsNamedByIndex) {
  testing::check_property("CUDA decode batch/bad head", 20, [] {
    std::vector<DecodeCase> cases;
    cases.push_back(testing::draw_decode_case());
    cases.push_back(testing::draw_decode_case());
    std::vector<DecodeHeadInput> in{cases[0].input(), cases[1].input()};
    Outputs o = make_outputs(cases);
    o.out[1].pop_back();  // head 1's output is one float short
    o.views[1] = DecodeHeadOutput{o.out[1], o.probs[1]};
    try {
      const CudaDecodeBatchHost host(in, o.views);
      RC_FAIL("a short output was accepted");
    } catch (const InputError& e) {
      RC_ASSERT(std::string(e.what()).find("heads[1]") != std::string::npos);
      RC_ASSERT(std::string(e.what()).find("out") != std::string::npos);
    }
  });
}

}  // namespace
}  // namespace kvcheck
