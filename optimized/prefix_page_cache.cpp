#include "optimized/prefix_page_cache.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace kvcheck {

std::int64_t PrefixPageCache::Hit::tokens() const {
  return static_cast<std::int64_t>(chain.size()) * tokens_per_page;
}

namespace {

// Each entry holds a page of its own in every head: no more entries than that fills the pool.
std::int64_t max_entries(const PagedKvCache& cache) {
  return std::max<std::int64_t>(1, cache.pool_pages() / cache.manager().heads_per_request());
}

}  // namespace

PrefixPageCache::PrefixPageCache(PagedKvCache& cache, int hash_bits)
    : cache_(cache),
      page_tokens_(cache.manager().pool().tokens_per_page(kHighTier)),
      index_(max_entries(cache), hash_bits) {
  if (!cache.policy().prefix_closed()) {
    throw std::invalid_argument(fmt::format("prefix cache: policy {} is not prefix-closed", cache.policy().name()));
  }
  const std::int64_t n = max_entries(cache);
  pins_.assign(static_cast<std::size_t>(n), 0);
  for (std::int64_t i = n - 1; i >= 0; --i) free_ids_.push_back(static_cast<BlockId>(i));
}

PrefixPageCache::Hit PrefixPageCache::lookup(std::span<const std::int32_t> prompt, std::int64_t max_tokens) {
  Hit hit;
  hit.tokens_per_page = page_tokens_;
  const auto a = static_cast<std::size_t>(page_tokens_);
  BlockId parent = kNoBlock;
  for (std::size_t at = 0; at + a <= prompt.size() && static_cast<std::int64_t>(at + a) <= max_tokens; at += a) {
    const BlockId e = index_.find(parent, prompt.subspan(at, a));
    if (e == kNoBlock) break;
    hit.chain.push_back(e);
    parent = e;
  }
  return hit;
}

void PrefixPageCache::pin(std::span<const BlockId> chain) {
  for (const BlockId e : chain) {
    if (pins_[static_cast<std::size_t>(e)]++ == 0) index_.remove_idle(e);
  }
}

void PrefixPageCache::unpin(std::span<const BlockId> chain) {
  // Leaves first, so that the LRU holds a chain's deeper pages as older than its root.
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    std::int32_t& pins = pins_[static_cast<std::size_t>(*it)];
    if (pins <= 0) throw std::logic_error(fmt::format("prefix cache: entry {} unpinned more than pinned", *it));
    if (--pins == 0) index_.push_idle(*it);
  }
}

std::vector<BlockId> PrefixPageCache::insert(std::int64_t request, std::span<const std::int32_t> prompt, const Hit& hit) {
  std::vector<BlockId> chain = hit.chain;
  const auto a = static_cast<std::size_t>(page_tokens_);
  BlockId parent = chain.empty() ? kNoBlock : chain.back();
  for (std::size_t at = chain.size() * a; at + a <= prompt.size(); at += a) {
    const std::span<const std::int32_t> tokens = prompt.subspan(at, a);
    // Another request may have registered the same page meanwhile: its entry serves, this
    // request's copy of the page stays private.
    if (const BlockId same = index_.find(parent, tokens); same != kNoBlock) {
      pin(std::span(&same, 1));
      chain.push_back(same);
      parent = same;
      continue;
    }
    if (free_ids_.empty()) break;
    const BlockId e = free_ids_.back();
    cache_.share_prefix(request, holder(e), static_cast<std::int64_t>(at + a));
    free_ids_.pop_back();
    if (!index_.insert(parent, e, tokens)) {
      throw std::logic_error(fmt::format("prefix cache: entry {} could not be inserted", e));
    }
    pins_[static_cast<std::size_t>(e)] = 1;
    ++stats_.inserted_entries;
    chain.push_back(e);
    parent = e;
  }
  return chain;
}

std::int64_t PrefixPageCache::shared_pages() const {
  std::int64_t n = 0;
  for (const std::int32_t pins : pins_) n += pins >= 2;
  return n * cache_.manager().heads_per_request();
}

bool PrefixPageCache::evict_one() {
  const BlockId oldest = index_.oldest_idle();
  if (oldest == kNoBlock) return false;
  // Idle: no request uses it, hence none uses a descendant (a chain pins its ancestors).
  for (const BlockId e : index_.erase_subtree(oldest)) {
    cache_.release(holder(e));
    free_ids_.push_back(e);
    ++stats_.evicted_entries;
  }
  return true;
}

}  // namespace kvcheck
