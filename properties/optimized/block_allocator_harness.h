// The rc::state harness shared by block_allocator_props.cpp and slot_strategies_props.cpp: the
// model (oracles/block_allocator_model.h), the system under test (BlockAllocator + SlotManager
// in the poisoned test configuration), the commands, and the check that runs after every command.
//
// Commands: admit a request (prefix-cache insert, and lookup of its leading full blocks); admit a
// request that repeats an earlier prompt's prefix (prefix-cache hits); decode steps (each: the
// strategy's append, then one eviction of a drawn victim when live tokens exceed the budget);
// finish; preempt; fork; copy-on-write write (append at the end of a sequence whose last block
// is shared); prefix-cache lookup (changes nothing).
//
// After every command (check_state):
//   - every block id is in exactly one place: the free list, the LRU of idle cached blocks, or
//     owned (refcount > 0); free + idle + used = pool; used_count() agrees;
//   - refcount = number of block-table entries holding the block (the cache holds none);
//   - a finished/preempted sequence owns nothing (it has no table; the tables left are exactly
//     the model's), and every table, next position, live mask, fill count, refcount, the free
//     set, the LRU order and the cache entries (parent, tokens) equal the model's;
//   - each sequence's live count equals the popcount of its masks and the model's live count;
//     the slot view and the fragmentation statistics agree with it;
//   - poison: every slot of a free block and every dead or unwritten slot of an owned or idle
//     block holds kPoison; every live slot holds the model's token and position;
//   - PoolExhausted is thrown exactly when the model is exhausted, and then nothing changed (the
//     state still equals the model's unchanged state).
#pragma once

#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "optimized/block_allocator.h"
#include "optimized/pool_exhausted.h"
#include "optimized/slot_strategies.h"
#include "oracles/block_allocator_model.h"

namespace kvcheck::testing {

struct HarnessConfig {
  std::int64_t blocks = 96;
  std::int64_t block_size = 4;
  int hash_bits = 2;
  SlotStrategy strategy = SlotStrategy::kNoOp;
  std::int64_t budget = 40;
  std::int64_t max_prompt = 140;
  std::int64_t max_steps = 12;  // decode steps per command
};

inline BlockAllocatorModel::Strategy model_strategy(SlotStrategy s) {
  switch (s) {
    case SlotStrategy::kNoOp: return BlockAllocatorModel::Strategy::kNoOp;
    case SlotStrategy::kFreeBlock: return BlockAllocatorModel::Strategy::kFreeBlock;
    case SlotStrategy::kSparseCopy: return BlockAllocatorModel::Strategy::kSparseCopy;
    case SlotStrategy::kSlotReuse: return BlockAllocatorModel::Strategy::kSlotReuse;
  }
  return BlockAllocatorModel::Strategy::kNoOp;
}

struct HarnessState {
  HarnessConfig config;
  BlockAllocatorModel model;
  std::int64_t next_seq = 0;
  std::vector<std::vector<std::int32_t>> prompts;  // every admitted prompt, for prefix reuse

  explicit HarnessState(const HarnessConfig& c)
      : config(c), model(c.blocks, c.block_size, true, model_strategy(c.strategy)) {}
  std::vector<std::int64_t> active() const {
    std::vector<std::int64_t> out;
    for (const auto& [id, s] : model.sequences()) out.push_back(id);
    return out;
  }
};

// Sequences that reached >= 100 tokens (next position) in runs of the harness, over the process.
inline std::atomic<std::int64_t>& long_sequences() {
  static std::atomic<std::int64_t> n{0};
  return n;
}
// Coverage counters over the process: exhaustions, copy-on-write copies, admits with cache hits,
// evictions.
struct HarnessCoverage {
  std::atomic<std::int64_t> exhausted{0}, cow{0}, cache_hit_admits{0}, evictions{0};
};
inline HarnessCoverage& coverage() {
  static HarnessCoverage c;
  return c;
}
inline std::string coverage_line() {
  const HarnessCoverage& c = coverage();
  return fmt::format("{} sequences reached 100 tokens; {} exhaustions, {} copy-on-write copies, {} admits with "
                     "prefix-cache hits, {} evictions",
                     long_sequences().load(), c.exhausted.load(), c.cow.load(), c.cache_hit_admits.load(),
                     c.evictions.load());
}
inline void reset_coverage() {
  long_sequences() = 0;
  coverage().exhausted = 0;
  coverage().cow = 0;
  coverage().cache_hit_admits = 0;
  coverage().evictions = 0;
}

struct HarnessSut {
  BlockAllocator alloc;
  SlotManager mgr;
  std::set<SeqId> long_seen;
  explicit HarnessSut(const HarnessConfig& c)
      : alloc(BlockAllocatorConfig{c.blocks, c.block_size, true, c.hash_bits, true}), mgr(alloc, c.strategy) {}
  std::int64_t cow_seen = 0;
  void note_lengths() {
    coverage().cow += alloc.cow_copies() - cow_seen;
    cow_seen = alloc.cow_copies();
    for (const SeqId s : alloc.sequences()) {
      if (alloc.next_position(s) >= 100 && long_seen.insert(s).second) ++long_sequences();
    }
  }
};

using HarnessCommand = rc::state::Command<HarnessState, HarnessSut>;

#define KV_REQUIRE(cond, ...)                                                      \
  do {                                                                             \
    if (!(cond)) RC_FAIL(fmt::format("{}: {}", #cond, fmt::format(__VA_ARGS__))); \
  } while (false)

inline void check_state(const BlockAllocatorModel& m, const HarnessSut& sut) {
  const BlockAllocator& a = sut.alloc;
  const std::int64_t pool = a.pool_size();
  const std::int64_t bs = a.block_size();
  const PrefixCache& cache = a.prefix_cache();

  // Places: free list, idle LRU, owned.
  std::vector<int> places(static_cast<std::size_t>(pool), 0);
  const std::vector<BlockId> free_ids = a.free_ids();
  for (const BlockId b : free_ids) {
    KV_REQUIRE(b >= 0 && b < pool, "free id {} out of range", b);
    ++places[static_cast<std::size_t>(b)];
    KV_REQUIRE(a.refcount(b) == 0, "free block {} has refcount {}", b, a.refcount(b));
    KV_REQUIRE(!cache.contains(b), "free block {} is cached", b);
  }
  const std::vector<BlockId> idle = cache.idle_order();
  KV_REQUIRE(static_cast<std::int64_t>(idle.size()) == cache.idle_count(), "LRU length {} vs idle count {}", idle.size(),
             cache.idle_count());
  for (const BlockId b : idle) {
    ++places[static_cast<std::size_t>(b)];
    KV_REQUIRE(a.refcount(b) == 0 && cache.contains(b), "idle block {}: refcount {} cached {}", b, a.refcount(b),
               cache.contains(b));
  }
  std::int64_t owned = 0;
  for (BlockId b = 0; b < pool; ++b) {
    if (a.refcount(b) > 0) {
      ++owned;
      ++places[static_cast<std::size_t>(b)];
    }
    KV_REQUIRE(places[static_cast<std::size_t>(b)] == 1, "block {} is in {} places (refcount {})", b,
               places[static_cast<std::size_t>(b)], a.refcount(b));
  }
  KV_REQUIRE(static_cast<std::int64_t>(free_ids.size()) + cache.idle_count() + owned == pool,
             "free {} + idle {} + used {} != pool {}", free_ids.size(), cache.idle_count(), owned, pool);
  KV_REQUIRE(a.used_count() == owned, "used_count {} vs owned {}", a.used_count(), owned);

  // Refcounts = owners.
  std::vector<std::int64_t> owners(static_cast<std::size_t>(pool), 0);
  const std::vector<SeqId> seqs = a.sequences();
  for (const SeqId s : seqs) {
    for (const BlockId b : a.block_table(s)) ++owners[static_cast<std::size_t>(b)];
  }
  for (BlockId b = 0; b < pool; ++b) {
    KV_REQUIRE(a.refcount(b) == owners[static_cast<std::size_t>(b)], "block {}: refcount {} but {} owners", b,
               a.refcount(b), owners[static_cast<std::size_t>(b)]);
  }

  // Against the model.
  std::vector<SeqId> model_seqs;
  for (const auto& [id, s] : m.sequences()) model_seqs.push_back(id);
  KV_REQUIRE(seqs == model_seqs, "sequences [{}] vs model [{}]", fmt::join(seqs, ","), fmt::join(model_seqs, ","));
  for (const auto& [id, ms] : m.sequences()) {
    KV_REQUIRE(a.block_table(id) == ms.table, "sequence {}: table [{}] vs model [{}]", id,
               fmt::join(a.block_table(id), ","), fmt::join(ms.table, ","));
    KV_REQUIRE(a.next_position(id) == ms.next_position, "sequence {}: next position {} vs {}", id, a.next_position(id),
               ms.next_position);
    std::int64_t pop = 0;
    for (const BlockId b : a.block_table(id)) pop += std::popcount(a.live_mask(b));
    const std::int64_t model_live = m.live_count(id);
    KV_REQUIRE(a.live_tokens(id) == pop && pop == model_live, "sequence {}: live {} popcount {} model {}", id,
               a.live_tokens(id), pop, model_live);
    const FragmentationStats f = sut.mgr.fragmentation(id);
    KV_REQUIRE(f.live_slots == model_live && f.allocated_slots == static_cast<std::int64_t>(ms.table.size()) * bs,
               "sequence {}: fragmentation stats {}/{}", id, f.live_slots, f.allocated_slots);
    const SequenceSlotView v = sut.mgr.view(id);
    KV_REQUIRE(v.blocks == ms.table && v.live_masks.size() == ms.table.size(), "sequence {}: view", id);
  }
  const std::set<BlockId> free_set(free_ids.begin(), free_ids.end());
  KV_REQUIRE(free_set == m.free_ids(), "free set [{}] vs model [{}]", fmt::join(free_set, ","),
             fmt::join(m.free_ids(), ","));
  const std::vector<BlockId> model_lru(m.lru().begin(), m.lru().end());
  KV_REQUIRE(idle == model_lru, "LRU [{}] vs model [{}]", fmt::join(idle, ","), fmt::join(model_lru, ","));

  for (BlockId b = 0; b < pool; ++b) {
    const BlockAllocatorModel::Block& mb = m.blocks()[static_cast<std::size_t>(b)];
    KV_REQUIRE(a.refcount(b) == mb.refcount, "block {}: refcount {} vs model {}", b, a.refcount(b), mb.refcount);
    const bool in_use = a.refcount(b) > 0 || cache.is_idle(b);
    for (std::int64_t j = 0; j < bs; ++j) {
      const SlotPayload& p = a.payload(b, j);
      const bool live = in_use && ((a.live_mask(b) >> j) & 1U) != 0;
      if (!live) {
        KV_REQUIRE(p == SlotPayload{}, "block {} slot {} is not live but holds ({}, {}), not poison", b, j, p.token,
                   p.position);
        continue;
      }
      const BlockAllocatorModel::Slot& ms = mb.slots[static_cast<std::size_t>(j)];
      KV_REQUIRE(ms.live && j < mb.filled, "block {} slot {} live but dead in the model", b, j);
      KV_REQUIRE(p.token == ms.token && p.position == ms.position, "block {} slot {}: ({}, {}) vs model ({}, {})", b, j,
                 p.token, p.position, ms.token, ms.position);
    }
    if (in_use) {
      KV_REQUIRE(a.filled(b) == mb.filled, "block {}: filled {} vs model {}", b, a.filled(b), mb.filled);
      std::int64_t model_live = 0;
      for (const auto& s : mb.slots) model_live += s.live ? 1 : 0;
      KV_REQUIRE(std::popcount(a.live_mask(b)) == model_live, "block {}: live {} vs model {}", b,
                 std::popcount(a.live_mask(b)), model_live);
    }
    // Cache entries.
    const std::vector<std::int32_t>* key = m.key_of(b);
    KV_REQUIRE(cache.contains(b) == (key != nullptr), "block {}: cached {} vs model {}", b, cache.contains(b),
               key != nullptr);
    if (key != nullptr) {
      const std::vector<std::int32_t> tokens(key->end() - bs, key->end());
      KV_REQUIRE(cache.tokens_of(b) == tokens, "block {}: cached tokens differ from the model's", b);
      BlockId parent = kNoBlock;
      if (static_cast<std::int64_t>(key->size()) > bs) {
        const std::vector<std::int32_t> parent_key(key->begin(), key->end() - bs);
        parent = m.cache().at(parent_key);
      }
      KV_REQUIRE(cache.parent_of(b) == parent, "block {}: cached parent {} vs model {}", b, cache.parent_of(b), parent);
    }
  }
  KV_REQUIRE(cache.size() == static_cast<std::int64_t>(m.cache().size()), "cache size {} vs model {}", cache.size(),
             m.cache().size());
}

// A prompt: a prefix of one of three fixed "system prompts" (tokens from a 3-letter alphabet,
// so that equal blocks under different parents are common) and a random tail.
inline std::vector<std::int32_t> family_prefix(int family, std::int64_t length) {
  std::vector<std::int32_t> p;
  std::uint64_t x = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(family + 1);
  for (std::int64_t i = 0; i < length; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    p.push_back(static_cast<std::int32_t>(x % 3));
  }
  return p;
}

inline std::vector<std::int32_t> draw_prompt(const HarnessState& s) {
  std::vector<std::int32_t> p;
  const int kind = *rc::gen::inRange(0, 3);
  if (kind == 0 || s.prompts.empty()) {
    p = family_prefix(*rc::gen::inRange(0, 3), *rc::gen::inRange<std::int64_t>(0, s.config.max_prompt + 1));
  } else {
    // An earlier prompt's prefix (possibly whole).
    const auto& earlier = s.prompts[*rc::gen::inRange<std::size_t>(0, s.prompts.size())];
    p.assign(earlier.begin(), earlier.begin() + *rc::gen::inRange<std::ptrdiff_t>(0, static_cast<std::ptrdiff_t>(earlier.size()) + 1));
  }
  const auto tail = *rc::gen::inRange<std::int64_t>(0, kind == 2 ? 2 : 12);
  for (std::int64_t i = 0; i < tail; ++i) p.push_back(*rc::gen::inRange<std::int32_t>(0, 3));
  if (p.empty()) p.push_back(0);
  return p;
}

inline std::int64_t pick_active(const HarnessState& s) {
  const std::vector<std::int64_t> a = s.active();
  RC_PRE(!a.empty());
  return a[*rc::gen::inRange<std::size_t>(0, a.size())];
}

// Runs `sut_op` (which may throw PoolExhausted) and requires it to throw exactly when the model
// op returned false.
template <typename SutOp>
void expect_same_outcome(bool model_ok, SutOp&& sut_op, const std::string& what) {
  bool exhausted = false;
  try {
    sut_op();
  } catch (const PoolExhausted&) {
    exhausted = true;
    ++coverage().exhausted;
  }
  KV_REQUIRE(exhausted == !model_ok, "{}: engine {} but the model {}", what, exhausted ? "is exhausted" : "succeeded",
             model_ok ? "succeeded" : "is exhausted");
}

struct Admit : HarnessCommand {
  std::int64_t seq;
  std::vector<std::int32_t> prompt;
  explicit Admit(const HarnessState& s) : seq(s.next_seq), prompt(draw_prompt(s)) {}
  void apply(HarnessState& s) const override {
    if (s.model.admit(seq, prompt)) s.prompts.push_back(prompt);
    ++s.next_seq;
  }
  void run(const HarnessState& s, HarnessSut& sut) const override {
    BlockAllocatorModel m = s.model;
    const std::int64_t model_hits = m.cached_prefix_blocks(prompt);
    KV_REQUIRE(sut.alloc.cached_prefix_blocks(prompt) == model_hits, "lookup before admit of {}", seq);
    const bool ok = m.admit(seq, prompt);
    if (model_hits > 0 && ok) ++coverage().cache_hit_admits;
    expect_same_outcome(ok, [&] { sut.alloc.admit(seq, prompt); }, fmt::format("admit {}", seq));
    check_state(m, sut);
    sut.note_lengths();
  }
  void show(std::ostream& os) const override {
    os << fmt::format("Admit(seq {}, {} tokens: [{}])", seq, prompt.size(), fmt::join(prompt, ","));
  }
};

struct Decode : HarnessCommand {
  std::int64_t seq;
  std::vector<std::int32_t> tokens;
  std::vector<std::uint32_t> victim_ranks;
  explicit Decode(const HarnessState& s) : seq(pick_active(s)) {
    const auto steps = *rc::gen::inRange<std::int64_t>(1, s.config.max_steps + 1);
    for (std::int64_t i = 0; i < steps; ++i) {
      tokens.push_back(*rc::gen::inRange<std::int32_t>(0, 1000));
      victim_ranks.push_back(*rc::gen::arbitrary<std::uint32_t>());
    }
  }
  void checkPreconditions(const HarnessState& s) const override { RC_PRE(s.model.has(seq)); }
  // One step on the model; false when exhausted (the rest of the command is skipped).
  static bool model_step(BlockAllocatorModel& m, std::int64_t seq, std::int32_t token, std::uint32_t rank,
                         std::int64_t budget, std::int32_t* victim) {
    *victim = -1;
    if (!m.append(seq, token)) return false;
    if (m.live_count(seq) <= budget) return true;
    const auto live = m.live_tokens(seq);
    *victim = live[rank % live.size()].first;
    return m.evict(seq, *victim);
  }
  void apply(HarnessState& s) const override {
    std::int32_t victim = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (!model_step(s.model, seq, tokens[i], victim_ranks[i], s.config.budget, &victim)) break;
    }
  }
  void run(const HarnessState& s, HarnessSut& sut) const override {
    BlockAllocatorModel m = s.model;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::int32_t victim = -1;
      const bool appended = m.append(seq, tokens[i]);
      expect_same_outcome(appended, [&] { sut.mgr.append(seq, tokens[i]); }, fmt::format("append to {}", seq));
      if (!appended) {
        check_state(m, sut);
        break;
      }
      bool ok = true;
      if (m.live_count(seq) > s.config.budget) {
        const auto live = m.live_tokens(seq);
        victim = live[victim_ranks[i] % live.size()].first;
        ok = m.evict(seq, victim);
        ++coverage().evictions;
        expect_same_outcome(ok, [&] { sut.mgr.evict(seq, victim); }, fmt::format("evict {} of {}", victim, seq));
      }
      check_state(m, sut);
      KV_REQUIRE(sut.mgr.copy_stats().copied_slots == m.copied_slots() &&
                     sut.mgr.copy_stats().preallocated_blocks == m.preallocated_blocks(),
                 "sequence {}: copy volume {} slots, {} pre-allocated blocks; model {}, {}", seq,
                 sut.mgr.copy_stats().copied_slots, sut.mgr.copy_stats().preallocated_blocks, m.copied_slots(),
                 m.preallocated_blocks());
      if (!ok) break;
    }
    sut.note_lengths();
  }
  void show(std::ostream& os) const override {
    os << fmt::format("Decode(seq {}, tokens [{}], victim ranks [{}])", seq, fmt::join(tokens, ","),
                      fmt::join(victim_ranks, ","));
  }
};

struct Finish : HarnessCommand {
  std::int64_t seq;
  explicit Finish(const HarnessState& s) : seq(pick_active(s)) {}
  void checkPreconditions(const HarnessState& s) const override { RC_PRE(s.model.has(seq)); }
  void apply(HarnessState& s) const override { s.model.release_sequence(seq); }
  void run(const HarnessState& s, HarnessSut& sut) const override {
    BlockAllocatorModel m = s.model;
    m.release_sequence(seq);
    sut.alloc.free_sequence(seq);
    KV_REQUIRE(!sut.alloc.has_sequence(seq), "finished sequence {} still has a table", seq);
    check_state(m, sut);
  }
  void show(std::ostream& os) const override { os << "Finish(seq " << seq << ")"; }
};

struct Preempt : HarnessCommand {
  std::int64_t seq;
  explicit Preempt(const HarnessState& s) : seq(pick_active(s)) {}
  void checkPreconditions(const HarnessState& s) const override { RC_PRE(s.model.has(seq)); }
  void apply(HarnessState& s) const override { s.model.release_sequence(seq); }
  void run(const HarnessState& s, HarnessSut& sut) const override {
    BlockAllocatorModel m = s.model;
    const auto expected = m.live_tokens(seq);
    m.release_sequence(seq);
    const std::vector<SlotPayload> got = sut.alloc.preempt(seq);
    KV_REQUIRE(got.size() == expected.size(), "preempt {}: {} live slots returned, model {}", seq, got.size(),
               expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      KV_REQUIRE(got[i].position == expected[i].first && got[i].token == expected[i].second,
                 "preempt {}: slot {} differs", seq, i);
    }
    KV_REQUIRE(!sut.alloc.has_sequence(seq), "preempted sequence {} still has a table", seq);
    check_state(m, sut);
  }
  void show(std::ostream& os) const override { os << "Preempt(seq " << seq << ")"; }
};

struct Fork : HarnessCommand {
  std::int64_t parent, child;
  explicit Fork(const HarnessState& s) : parent(pick_active(s)), child(s.next_seq) {}
  void checkPreconditions(const HarnessState& s) const override { RC_PRE(s.model.has(parent) && !s.model.has(child)); }
  void apply(HarnessState& s) const override {
    s.model.fork(parent, child);
    ++s.next_seq;
  }
  void run(const HarnessState& s, HarnessSut& sut) const override {
    BlockAllocatorModel m = s.model;
    m.fork(parent, child);
    sut.alloc.fork(parent, child);
    check_state(m, sut);
    sut.note_lengths();
  }
  void show(std::ostream& os) const override { os << "Fork(" << parent << " -> " << child << ")"; }
};

// An append at the end of a sequence whose last block is shared and has room: copy-on-write.
struct CowWrite : HarnessCommand {
  std::int64_t seq;
  std::int32_t token;
  explicit CowWrite(const HarnessState& s) : seq(0), token(*rc::gen::inRange<std::int32_t>(0, 1000)) {
    std::vector<std::int64_t> shared;
    for (const auto& [id, ms] : s.model.sequences()) {
      if (ms.table.empty()) continue;
      const auto& last = s.model.blocks()[static_cast<std::size_t>(ms.table.back())];
      if (last.refcount > 1 && last.filled < s.model.block_size()) shared.push_back(id);
    }
    RC_PRE(!shared.empty());
    seq = shared[*rc::gen::inRange<std::size_t>(0, shared.size())];
  }
  void checkPreconditions(const HarnessState& s) const override { RC_PRE(s.model.has(seq)); }
  void apply(HarnessState& s) const override { s.model.append_at_end(seq, token); }
  void run(const HarnessState& s, HarnessSut& sut) const override {
    BlockAllocatorModel m = s.model;
    const bool ok = m.append_at_end(seq, token);
    const std::int64_t copies = sut.alloc.cow_copies();
    const BlockId old_last = sut.alloc.block_table(seq).back();
    const std::int64_t old_ref = sut.alloc.refcount(old_last);
    expect_same_outcome(ok, [&] { sut.alloc.append(seq, token); }, fmt::format("copy-on-write append to {}", seq));
    if (ok && old_ref > 1) {
      KV_REQUIRE(sut.alloc.cow_copies() == copies + 1, "copy-on-write of {} copied {} blocks", seq,
                 sut.alloc.cow_copies() - copies);
      KV_REQUIRE(sut.alloc.refcount(old_last) == old_ref - 1, "copy-on-write of {}: old block {} refcount {} -> {}", seq,
                 old_last, old_ref, sut.alloc.refcount(old_last));
    }
    check_state(m, sut);
    sut.note_lengths();
  }
  void show(std::ostream& os) const override { os << "CowWrite(seq " << seq << ", token " << token << ")"; }
};

struct PrefixLookup : HarnessCommand {
  std::vector<std::int32_t> prompt;
  explicit PrefixLookup(const HarnessState& s) : prompt(draw_prompt(s)) {}
  void run(const HarnessState& s, HarnessSut& sut) const override {
    const std::int64_t want = s.model.cached_prefix_blocks(prompt);
    const std::int64_t got = sut.alloc.cached_prefix_blocks(prompt);
    KV_REQUIRE(got == want, "prefix lookup of [{}]: {} cached blocks, model {}", fmt::join(prompt, ","), got, want);
    check_state(s.model, sut);
  }
  void show(std::ostream& os) const override {
    os << fmt::format("PrefixLookup({} tokens: [{}])", prompt.size(), fmt::join(prompt, ","));
  }
};

// One stateful run from an empty pool.
template <typename... Commands>
void run_harness(const HarnessConfig& config) {
  const HarnessState initial(config);
  HarnessSut sut(config);
  rc::state::check(initial, sut, rc::state::gen::execOneOfWithArgs<Commands...>());
}

}  // namespace kvcheck::testing
