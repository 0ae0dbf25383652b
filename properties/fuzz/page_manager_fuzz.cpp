// The page manager driven by a command stream from the fuzzer's bytes (see fuzz_targets.h):
// admit + prompt phase, decode steps (evict, demote, flush, each slot strategy), repacking,
// finish and preempt on a small pool, with the invariants of docs/design.md §6
// checked after every command, and "a failed operation changes nothing" checked after every
// InputError or PoolExhausted.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <vector>

#include "optimized/pool_exhausted.h"
#include "optimized/unified_page_manager.h"
#include "properties/fuzz/fuzz_bytes.h"
#include "properties/fuzz/fuzz_targets.h"
#include "reference/errors.h"

namespace kvcheck::fuzz {
namespace {

[[noreturn]] void broken(const char* what) {
  std::fprintf(stderr, "page manager invariant broken: %s\n", what);
  std::abort();
}

// Everything an operation may change: free run, tables, live masks.
struct Snapshot {
  std::vector<PageId> free_ids;
  std::int64_t start = 0;
  std::map<std::int64_t, std::vector<std::vector<PageId>>> tables;
  std::vector<std::uint64_t> masks;
  bool operator==(const Snapshot&) const = default;
};

Snapshot snapshot(const UnifiedPageManager& m) {
  Snapshot s;
  s.free_ids = m.free_list().free_ids();
  s.start = m.free_list().start_position();
  for (const std::int64_t r : m.requests()) {
    auto& heads = s.tables[r];
    for (std::int32_t l = 0; l < m.config().layers; ++l) {
      for (std::int32_t h = 0; h < m.config().kv_heads; ++h) {
        const auto e = m.table(r, l, h).entries();
        heads.emplace_back(e.begin(), e.end());
      }
    }
  }
  for (PageId id = 0; id < m.pool().pages(); ++id) {
    const auto mask = m.pool().live_mask(id);
    s.masks.insert(s.masks.end(), mask.begin(), mask.end());
  }
  return s;
}

void check_invariants(const UnifiedPageManager& m) {
  const PagePool& pool = m.pool();
  std::vector<int> places(static_cast<std::size_t>(pool.pages()), 0);
  for (const PageId id : m.free_list().free_ids()) {
    places[static_cast<std::size_t>(id)] += 1;
    if (!pool.owner(id).free() || pool.live_count(id) != 0) broken("a free page has an owner or live slots");
  }
  for (const std::int64_t r : m.requests()) {
    for (std::int32_t l = 0; l < m.config().layers; ++l) {
      for (std::int32_t h = 0; h < m.config().kv_heads; ++h) {
        const PageTable& t = m.table(r, l, h);
        if (t.count(kHighTier) + t.count(kLowTier) > t.length()) broken("the two sides of a table overlap");
        for (const int tier : {kHighTier, kLowTier}) {
          std::int64_t live = 0;
          for (std::int64_t i = 0; i < t.count(tier); ++i) {
            const PageId id = t.at(tier, i);
            places[static_cast<std::size_t>(id)] += 1;
            const PageOwner& o = pool.owner(id);
            if (o.tier != tier || !(o.head == HeadKey{r, l, h})) broken("a table page is owned by another head or tier");
            live += pool.live_count(id);
          }
          if (live != m.live_tokens(r, l, h, tier)) broken("a head's live count is not its live slots");
        }
      }
    }
  }
  for (const int p : places) {
    if (p != 1) broken("a page is in no place or in two");
  }
}

}  // namespace

int page_manager(const std::uint8_t* data, std::size_t size) {
  Bytes in(data, size);
  PageManagerConfig c;
  c.pool.pages = 4 + in.below(40);
  c.pool.page_bytes = in.below(2) == 0 ? 224 : 448;  // 4 / 8 tokens per page at head_dim 16 (K8V4 / K4V2)
  c.pool.head_dim = 16;
  c.pool.poison = true;
  c.layers = 1 + in.below(2);
  c.kv_heads = 1 + in.below(2);
  c.max_seq_len = 8 + in.below(40);
  c.compaction.mode = in.below(2) == 0 ? CompactionMode::kParallel : CompactionMode::kSequential;
  // Parallel mode runs the prefix-sum coordination on the calling thread: spawning threads for
  // every round would cut the rate to a few executions per second.
  c.compaction.threads = 1;
  c.compaction.min_parallel = 1;
  UnifiedPageManager m(c);
  const std::int64_t heads = c.layers * c.kv_heads;
  std::map<std::int64_t, std::int32_t> next_position;  // prompted requests -> their next position
  std::int64_t next_request = 0;
  for (int command = 0; command < 64 && !in.empty(); ++command) {
    const Snapshot before = snapshot(m);
    bool failed = false;
    try {
      switch (in.below(5)) {
        case 0: {  // a new request through the prompt phase
          const std::int64_t r = next_request++;
          const std::int64_t len = 1 + in.below(c.max_seq_len);
          PromptRequest p{r, len, {}};
          for (std::int64_t h = 0; h < heads; ++h) {
            const std::int64_t high = in.below(len + 1);
            p.heads.push_back(PromptHeadPlan{high, in.below(len - high + 1), {}, {}});
          }
          m.admit(r);
          try {
            m.prompt_phase({&p, 1});
          } catch (...) {
            m.finish(r);  // what the engine does: a prompt that does not fit leaves nothing
            throw;
          }
          next_position[r] = static_cast<std::int32_t>(len);
          break;
        }
        case 1: {  // one decode step over some prompted requests
          std::vector<DecodeHead> ops;
          for (const auto& entry : next_position) {
            const std::int64_t r = entry.first;  // (a structured binding cannot be captured by clang 14)
            const std::int32_t pos = entry.second;
            if (in.below(3) == 0) continue;
            const SlotStrategy slots = kAllSlotStrategies[static_cast<std::size_t>(in.below(4))];
            for (std::int32_t l = 0; l < c.layers; ++l) {
              for (std::int32_t h = 0; h < c.kv_heads; ++h) {
                DecodeHead op{HeadKey{r, l, h}, TokenPayload{pos, 0.0f}, {}, slots};
                const unsigned kind = in.next();
                // Live tokens named by the bytes: some beyond the head's (the manager must refuse those).
                const std::int64_t live = m.live_tokens(r, l, h, kHighTier) + m.live_tokens(r, l, h, kLowTier);
                auto token = [&] { return static_cast<std::size_t>(in.below(live + 2)); };
                if (kind & 1U) op.decision.evict = token();
                if (kind & 2U) op.decision.demote = token();
                op.decision.flush = (kind & 4U) != 0;
                ops.push_back(op);
              }
            }
          }
          m.decode_step(ops);
          for (const DecodeHead& op : ops) {
            next_position[op.head.request] = std::max(next_position[op.head.request], op.token.position + 1);
          }
          break;
        }
        case 2:
          m.repack();
          break;
        case 3:
        case 4: {
          if (next_position.empty()) break;
          auto it = next_position.begin();
          std::advance(it, in.below(static_cast<std::int64_t>(next_position.size())));
          if (in.below(2) == 0) {
            m.finish(it->first);
          } else {
            m.preempt(it->first);
          }
          next_position.erase(it);
          break;
        }
      }
    } catch (const InputError&) {
      failed = true;
    } catch (const PoolExhausted&) {
      failed = true;
    }
    if (failed && !(snapshot(m) == before)) broken("a failed operation changed the pages");
    check_invariants(m);
  }
  return 0;
}

}  // namespace kvcheck::fuzz
