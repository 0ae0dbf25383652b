// Copy-on-write sharing of unified pages (optimized/unified_page_manager.h share_prefix), on
// hand-checked cases and through the KV cache: a request that shares another's prefix pages
// decodes bit for bit as one that holds private copies of the same prompt, for fp16 and int8,
// while the sharer diverges.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "optimized/kv_policy.h"
#include "optimized/paged_kv_cache.h"
#include "optimized/pool_exhausted.h"
#include "optimized/unified_page_manager.h"
#include "reference/config.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

// head_dim 16, 224-byte pages: K8V4 holds 4 tokens per high page.
PageManagerConfig small_config(std::int64_t pages) {
  PageManagerConfig c;
  c.pool.pages = pages;
  c.pool.page_bytes = 224;
  c.pool.head_dim = 16;
  c.pool.poison = true;
  c.layers = 1;
  c.kv_heads = 2;
  c.max_seq_len = 16;
  return c;
}

// Request 0 with a 6-token prompt at high precision: pages of 4 + 2 tokens per head.
UnifiedPageManager prompted_manager(std::int64_t pages) {
  UnifiedPageManager m(small_config(pages));
  m.admit(0);
  PromptRequest p{0, 6, {PromptHeadPlan{6, 0, {}, {}}, PromptHeadPlan{6, 0, {}, {}}}};
  m.prompt_phase({&p, 1});
  return m;
}

DecodeHead append(std::int64_t request, std::int32_t head, std::int32_t position, StepDecision d = {}) {
  return DecodeHead{HeadKey{request, 0, head}, TokenPayload{position, 0.0f}, d, SlotStrategy::kSlotReuse};
}

TEST(SharedPages, ShareCountsReferencesAndCopiesOnWrite) {
  UnifiedPageManager m = prompted_manager(8);
  m.admit(1);
  m.share_prefix(0, 1, 6);
  EXPECT_TRUE(m.prompted(1));
  for (std::int32_t h = 0; h < 2; ++h) {
    EXPECT_EQ(m.table(1, 0, h).at(kHighTier, 0), m.table(0, 0, h).at(kHighTier, 0));
    EXPECT_EQ(m.table(1, 0, h).at(kHighTier, 1), m.table(0, 0, h).at(kHighTier, 1));
    EXPECT_EQ(m.refcount(m.table(0, 0, h).at(kHighTier, 1)), 2);
    EXPECT_EQ(m.live_tokens(1, 0, h, kHighTier), 6);
  }
  EXPECT_EQ(m.free_list().free_count(), 4);  // nothing allocated by sharing
  EXPECT_EQ(m.stats().shared_pages, 4);
  // Request 1 appends into the partly filled shared page of head 0: it gets a copy, request 0
  // keeps the original, unwritten.
  const PageId shared = m.table(0, 0, 0).at(kHighTier, 1);
  const std::vector<DecodeHead> step{append(1, 0, 6)};
  m.decode_step(step);
  const PageId copy = m.table(1, 0, 0).at(kHighTier, 1);
  EXPECT_NE(copy, shared);
  EXPECT_EQ(m.table(0, 0, 0).at(kHighTier, 1), shared);
  EXPECT_EQ(m.refcount(shared), 1);
  EXPECT_EQ(m.refcount(copy), 1);
  EXPECT_EQ(m.pool().live_count(shared), 2);
  EXPECT_EQ(m.pool().live_count(copy), 3);
  EXPECT_EQ(m.pool().payload(copy, 1), m.pool().payload(shared, 1));  // the prefix tokens came along
  EXPECT_EQ(m.pool().payload(copy, 2).position, 6);
  EXPECT_EQ(m.stats().cow_copies, 1);
  // The full first page stays shared; releasing request 0 drops its count, frees only its own pages.
  const PageId full = m.table(0, 0, 0).at(kHighTier, 0);
  const std::int64_t free_before = m.free_list().free_count();
  m.finish(0);
  EXPECT_EQ(m.refcount(full), 1);
  EXPECT_EQ(m.refcount(shared), 0);
  EXPECT_EQ(m.free_list().free_count(), free_before + 1);  // head 0's original last page; the rest are shared
}

TEST(SharedPages, TwoSharersAppendingInOneStepCopyOnceAndWriteOnceInPlace) {
  UnifiedPageManager m = prompted_manager(8);
  m.admit(1);
  m.share_prefix(0, 1, 6);
  const PageId shared = m.table(0, 0, 0).at(kHighTier, 1);
  const std::vector<DecodeHead> step{append(0, 0, 6), append(1, 0, 6)};
  m.decode_step(step);
  EXPECT_NE(m.table(0, 0, 0).at(kHighTier, 1), shared);  // the first op copies
  EXPECT_EQ(m.table(1, 0, 0).at(kHighTier, 1), shared);  // the second is then its only owner
  EXPECT_EQ(m.refcount(shared), 1);
  EXPECT_EQ(m.stats().cow_copies, 1);
}

TEST(SharedPages, BadSharesAndWritesOtherThanAppendsAreRejectedAndChangeNothing) {
  UnifiedPageManager m = prompted_manager(8);
  m.admit(1);
  EXPECT_THROW(m.share_prefix(0, 1, 5), InputError);  // the first 2 pages hold 6 live tokens
  EXPECT_THROW(m.share_prefix(0, 1, 7), InputError);
  EXPECT_THROW(m.share_prefix(1, 0, 4), InputError);  // not prompted
  EXPECT_THROW(m.share_prefix(0, 0, 4), InputError);
  EXPECT_EQ(m.stats().shared_pages, 0);
  m.share_prefix(0, 1, 4);  // whole pages only
  EXPECT_EQ(m.table(1, 0, 0).count(kHighTier), 1);
  StepDecision evict;
  evict.evict = 0;
  const std::vector<DecodeHead> step{append(1, 0, 6, evict)};
  EXPECT_THROW(m.decode_step(step), InputError);
  // Repack leaves the shared heads alone.
  m.repack();
  EXPECT_EQ(m.refcount(m.table(0, 0, 0).at(kHighTier, 0)), 2);
}

TEST(SharedPages, CopyOnWriteThatDoesNotFitChangesNothing) {
  UnifiedPageManager m = prompted_manager(4);  // every page in use
  m.admit(1);
  m.share_prefix(0, 1, 6);
  const std::vector<DecodeHead> step{append(1, 0, 6)};
  EXPECT_THROW(m.decode_step(step), PoolExhausted);
  EXPECT_EQ(m.refcount(m.table(0, 0, 0).at(kHighTier, 1)), 2);
  EXPECT_EQ(m.live_tokens(1, 0, 0, kHighTier), 6);
  EXPECT_EQ(m.stats().cow_copies, 0);
}

// ---- through the KV cache: attention over shared pages is attention over private copies ------

ModelConfig tiny_model() {
  ModelConfig c;
  c.hidden_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  return c;
}

std::vector<float> random_rows(std::mt19937& rng, std::int64_t n) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// The decode attention output of every (layer, kv head) of a request for fixed queries.
std::vector<float> attention_of(const PagedKvCache& cache, const ModelConfig& model, std::int64_t request,
                                std::span<const float> q) {
  std::vector<float> all;
  std::vector<PageRead> pages;
  const std::int64_t group = model.group_size();
  for (std::int32_t l = 0; l < model.num_hidden_layers; ++l) {
    for (std::int32_t h = 0; h < model.num_key_value_heads; ++h) {
      cache.head_pages(request, l, h, pages);
      DecodeHeadInput in;
      in.head_dim = model.head_dim;
      in.group = group;
      in.scale = 0.25f;
      in.tiers = cache.tiers();
      in.pages = pages;
      in.q = q.subspan(static_cast<std::size_t>(h * group * model.head_dim),
                       static_cast<std::size_t>(group * model.head_dim));
      std::vector<float> out(static_cast<std::size_t>(group * model.head_dim));
      paged_decode_attention(in, DecodeHeadOutput{out, {}});
      all.insert(all.end(), out.begin(), out.end());
    }
  }
  return all;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Requests 0 and 1 hold the same prompt privately; request 2 shares request 0's prompt pages
// (its partly filled last page included). Each step appends a token to all three (request 0 a
// different one, so it diverges from what it shares, copying the shared page on its first
// write): request 2 must read exactly what request 1 reads, and request 0 what a private twin
// (request 3) reads.
void expect_sharing_invisible(const std::string& spec) {
  SCOPED_TRACE(spec);
  const ModelConfig model = tiny_model();
  const std::unique_ptr<KvPolicy> policy = make_policy(spec);
  PagedKvCache cache(model, *policy, PagedKvCacheConfig{128, 360, true});
  const std::int64_t tpp = cache.manager().pool().tokens_per_page(kHighTier);
  const std::int64_t prompt = 2 * tpp + 3;  // page-unaligned
  std::mt19937 rng(31);
  std::vector<std::vector<float>> keys, values;
  for (std::int32_t l = 0; l < model.num_hidden_layers; ++l) {
    keys.push_back(random_rows(rng, prompt * model.kv_dim()));
    values.push_back(random_rows(rng, prompt * model.kv_dim()));
  }
  for (std::int64_t r : {0, 1, 3}) {
    cache.reserve_prompt(r, prompt);
    for (std::int32_t l = 0; l < model.num_hidden_layers; ++l) {
      const auto i = static_cast<std::size_t>(l);
      cache.write_prompt_layer(r, l, prompt, keys[i], values[i]);
    }
  }
  cache.share_prefix(0, 2, prompt);
  EXPECT_EQ(cache.manager().stats().shared_pages, model.num_hidden_layers * model.num_key_value_heads * 3);
  const std::vector<float> q = random_rows(rng, model.q_dim());
  EXPECT_TRUE(same_bits(attention_of(cache, model, 2, q), attention_of(cache, model, 1, q)));
  const std::vector<std::int64_t> requests{0, 1, 2, 3};
  for (std::int32_t pos = static_cast<std::int32_t>(prompt); pos < prompt + tpp + 2; ++pos) {
    const std::vector<std::int32_t> positions(requests.size(), pos);
    cache.reserve(requests, positions);
    for (std::int32_t l = 0; l < model.num_hidden_layers; ++l) {
      const std::vector<float> k = random_rows(rng, model.kv_dim()), v = random_rows(rng, model.kv_dim());
      const std::vector<float> k0 = random_rows(rng, model.kv_dim()), v0 = random_rows(rng, model.kv_dim());
      for (std::int64_t r : {1, 2}) cache.write_token(r, l, pos, k, v);
      for (std::int64_t r : {0, 3}) cache.write_token(r, l, pos, k0, v0);
    }
    const std::vector<float> qs = random_rows(rng, model.q_dim());
    EXPECT_TRUE(same_bits(attention_of(cache, model, 2, qs), attention_of(cache, model, 1, qs))) << "position " << pos;
    EXPECT_TRUE(same_bits(attention_of(cache, model, 0, qs), attention_of(cache, model, 3, qs))) << "position " << pos;
    EXPECT_FALSE(same_bits(attention_of(cache, model, 0, qs), attention_of(cache, model, 2, qs))) << "position " << pos;
  }
  // One copy per head (request 0's first write; request 2 then owns the original alone).
  EXPECT_EQ(cache.manager().stats().cow_copies, model.num_hidden_layers * model.num_key_value_heads);
  EXPECT_EQ(cache.manager().stats().shared_pages, model.num_hidden_layers * model.num_key_value_heads * 2);
  cache.release(0);
  const std::vector<float> qs = random_rows(rng, model.q_dim());
  EXPECT_TRUE(same_bits(attention_of(cache, model, 2, qs), attention_of(cache, model, 1, qs)));
}

TEST(SharedPages, SharedPrefixDecodesBitForBitAsPrivateCopiesFp16) { expect_sharing_invisible("full-fp16"); }
TEST(SharedPages, SharedPrefixDecodesBitForBitAsPrivateCopiesInt8) { expect_sharing_invisible("int8"); }

}  // namespace
}  // namespace kvcheck
