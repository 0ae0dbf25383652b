#include "optimized/prefix_cache.h"

#include <algorithm>
#include <stdexcept>

namespace kvcheck {

PrefixCache::PrefixCache(std::int64_t blocks, int hash_bits)
    : entries_(static_cast<std::size_t>(blocks)),
      mask_(hash_bits >= 64 ? ~0ULL : ((1ULL << std::max(hash_bits, 1)) - 1ULL)) {}

std::uint64_t PrefixCache::chain_hash(std::uint64_t parent_hash, std::span<const std::int32_t> tokens) {
  std::uint64_t h = parent_hash ^ 0xcbf29ce484222325ULL;
  for (const std::int32_t t : tokens) {
    h ^= static_cast<std::uint32_t>(t);
    h *= 0x100000001b3ULL;
    h ^= h >> 29;
  }
  h ^= static_cast<std::uint64_t>(tokens.size());
  // splitmix64 finaliser
  h += 0x9e3779b97f4a7c15ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

BlockId PrefixCache::find(BlockId parent, std::span<const std::int32_t> tokens) const {
  if (parent != kNoBlock && !entries_[index(parent)].cached) return kNoBlock;
  const std::uint64_t h = chain_hash(parent_hash(parent), tokens);
  const auto [first, last] = by_bucket_.equal_range(bucket(h));
  for (auto it = first; it != last; ++it) {
    const Entry& e = entries_[index(it->second)];
    if (e.hash == h && e.parent == parent && std::equal(e.tokens.begin(), e.tokens.end(), tokens.begin(), tokens.end())) {
      return it->second;
    }
  }
  return kNoBlock;
}

bool PrefixCache::insert(BlockId parent, BlockId block, std::span<const std::int32_t> tokens) {
  if (entries_[index(block)].cached) return false;
  if (parent != kNoBlock && !entries_[index(parent)].cached) return false;
  if (find(parent, tokens) != kNoBlock) return false;
  Entry& e = entries_[index(block)];
  e.cached = true;
  e.idle = false;
  e.hash = chain_hash(parent_hash(parent), tokens);
  e.parent = parent;
  e.tokens.assign(tokens.begin(), tokens.end());
  e.children.clear();
  if (parent != kNoBlock) entries_[index(parent)].children.push_back(block);
  by_bucket_.emplace(bucket(e.hash), block);
  ++size_;
  return true;
}

std::vector<BlockId> PrefixCache::erase_subtree(BlockId block) {
  std::vector<BlockId> freed;
  if (!entries_[index(block)].cached) return freed;
  // Detach from the parent, then remove the subtree iteratively.
  const BlockId parent = entries_[index(block)].parent;
  if (parent != kNoBlock) {
    std::vector<BlockId>& siblings = entries_[index(parent)].children;
    siblings.erase(std::find(siblings.begin(), siblings.end(), block));
  }
  std::vector<BlockId> stack{block};
  while (!stack.empty()) {
    const BlockId b = stack.back();
    stack.pop_back();
    Entry& e = entries_[index(b)];
    for (const BlockId c : e.children) stack.push_back(c);
    e.children.clear();
    const auto [first, last] = by_bucket_.equal_range(bucket(e.hash));
    for (auto it = first; it != last; ++it) {
      if (it->second == b) {
        by_bucket_.erase(it);
        break;
      }
    }
    if (e.idle) {
      remove_idle(b);
      freed.push_back(b);
    }
    e.cached = false;
    e.parent = kNoBlock;
    e.tokens.clear();
    --size_;
  }
  return freed;
}

void PrefixCache::push_idle(BlockId block) {
  Entry& e = entries_[index(block)];
  if (!e.cached || e.idle) throw std::logic_error("PrefixCache::push_idle: block is not cached or already idle");
  e.idle = true;
  e.prev = lru_tail_;
  e.next = kNoBlock;
  if (lru_tail_ != kNoBlock) {
    entries_[index(lru_tail_)].next = block;
  } else {
    lru_head_ = block;
  }
  lru_tail_ = block;
  ++idle_count_;
}

void PrefixCache::remove_idle(BlockId block) {
  Entry& e = entries_[index(block)];
  if (!e.idle) return;
  if (e.prev != kNoBlock) {
    entries_[index(e.prev)].next = e.next;
  } else {
    lru_head_ = e.next;
  }
  if (e.next != kNoBlock) {
    entries_[index(e.next)].prev = e.prev;
  } else {
    lru_tail_ = e.prev;
  }
  e.prev = e.next = kNoBlock;
  e.idle = false;
  --idle_count_;
}

std::vector<BlockId> PrefixCache::idle_order() const {
  std::vector<BlockId> out;
  for (BlockId b = lru_head_; b != kNoBlock; b = entries_[index(b)].next) out.push_back(b);
  return out;
}

}  // namespace kvcheck
