// The engine's prefix cache (docs/design.md §6 "Prefix caching"): vLLM's automatic prefix caching
// over LeanKV's unified pages, used by the scheduler.
//
// An entry is one whole page of a prompt, in every (layer, kv head) of the high tier at once: the
// engine's policy is one, every head of a prefix-closed policy holds positions 0 .. n-1 packed,
// so page i of each head holds the same tokens i*a .. i*a + a - 1 (a tokens per page). Entries
// form chains keyed as optimized/prefix_cache.h keys blocks: hash(parent's hash, the page's
// token ids), a match accepted only when the parent entry and the tokens compare equal, so a
// hash collision never returns another prompt's pages (the properties cut the hash to a few bits).
// The key's other parts (policy spec, layer, head, tier) are fixed per cache: one cache per
// engine, and an entry covers every head.
//
// Holding. Each entry keeps its pages alive through a holder: a request id of the page manager's
// own (kHolderIds range) that took, with share_prefix, references to pages 0 .. i of the prompt
// that registered it. A page's reference count is then its tables plus the holders that list it,
// and an entry's own page returns to the free list only when the entry is evicted and no running
// request lists it. Entries a running request uses (its hit, and what its prompt registered) are
// pinned; the others are idle, in LRU order, and the oldest idle one goes first (with its cached
// descendants, idle too: a request using an entry uses its ancestors) when the scheduler needs
// pages: on admission before a request waits, and before a decode step preempts.
#pragma once

#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "optimized/paged_kv_cache.h"
#include "optimized/prefix_cache.h"

namespace kvcheck {

struct PrefixCacheStats {
  std::int64_t inserted_entries = 0;   // whole pages registered
  std::int64_t evicted_entries = 0;
};

class PrefixPageCache {
 public:
  // Page-manager request ids reserved for holders: [kHolderIds, kHolderIds + entries).
  static constexpr std::int64_t kHolderIds = std::numeric_limits<std::int64_t>::min();
  static bool is_holder(std::int64_t id) { return id < kHolderIds / 2; }

  // A cache over `cache`'s pool (at most one entry per pool page). hash_bits as PrefixCache's.
  explicit PrefixPageCache(PagedKvCache& cache, int hash_bits = 64);

  std::int64_t page_tokens() const { return page_tokens_; }

  // The longest chain of cached whole pages that starts `prompt` and holds at most `max_tokens`
  // tokens; its last entry's holder is what a hit shares from.
  struct Hit {
    std::vector<BlockId> chain;  // entries, root first
    std::int64_t tokens() const;
    std::int64_t tokens_per_page = 0;
  };
  Hit lookup(std::span<const std::int32_t> prompt, std::int64_t max_tokens);
  std::int64_t holder(BlockId entry) const { return kHolderIds + entry; }

  // Registers the whole pages of `request`'s just-prefilled prompt that are not cached yet, after
  // `hit` (which the request took); returns the request's whole chain (hit and new entries),
  // pinned for it. Stops early (the rest uncached) when no entry id is free.
  std::vector<BlockId> insert(std::int64_t request, std::span<const std::int32_t> prompt, const Hit& hit);
  // Pin / unpin a chain for a request (a chain is pinned once per request using it).
  void pin(std::span<const BlockId> chain);
  void unpin(std::span<const BlockId> chain);

  // Evicts the least recently used idle entry and its cached descendants (their holders released);
  // false when every entry is pinned or none is cached.
  bool evict_one();
  // Pages of entries that two or more running requests use (each entry: one page per head).
  std::int64_t shared_pages() const;
  std::int64_t idle_entries() const { return index_.idle_count(); }
  std::int64_t entries() const { return index_.size(); }
  const PrefixCacheStats& stats() const { return stats_; }

 private:
  PagedKvCache& cache_;
  std::int64_t page_tokens_;
  PrefixCache index_;
  std::vector<std::int32_t> pins_;  // per entry id: requests using it
  std::vector<BlockId> free_ids_;   // entry ids not in use, taken from the back
  PrefixCacheStats stats_;
};

}  // namespace kvcheck
