#include "oracles/block_allocator_model.h"

#include <algorithm>
#include <stdexcept>

namespace kvcheck {

namespace {

std::size_t at(std::int64_t i) { return static_cast<std::size_t>(i); }

}  // namespace

BlockAllocatorModel::BlockAllocatorModel(std::int64_t blocks, std::int64_t block_size, bool prefix_cache,
                                         Strategy strategy)
    : block_size_(block_size), prefix_cache_(prefix_cache), strategy_(strategy), blocks_(at(blocks)) {
  for (std::int64_t b = 0; b < blocks; ++b) free_.insert(static_cast<std::int32_t>(b));
}

const std::vector<std::int32_t>* BlockAllocatorModel::key_of(std::int32_t block) const {
  const auto it = key_.find(block);
  return it == key_.end() ? nullptr : &it->second;
}

std::int64_t BlockAllocatorModel::live_in(std::int32_t block) const {
  std::int64_t n = 0;
  for (const Slot& s : blocks_[at(block)].slots) n += s.live ? 1 : 0;
  return n;
}

std::int32_t BlockAllocatorModel::take() {
  std::int32_t id = 0;
  if (!free_.empty()) {
    id = *free_.begin();
    free_.erase(free_.begin());
  } else {
    if (lru_.empty()) throw std::logic_error("model: take() with nothing available");
    id = lru_.front();
    lru_.pop_front();
    uncache(id);
  }
  Block& b = blocks_[at(id)];
  b.refcount = 1;
  b.filled = 0;
  b.slots.assign(at(block_size_), Slot{});
  return id;
}

void BlockAllocatorModel::uncache(std::int32_t block) {
  const auto k = key_.find(block);
  if (k == key_.end()) return;
  const std::vector<std::int32_t> prefix = k->second;
  // Every key that starts with `prefix` (itself and its descendants).
  std::vector<std::int32_t> removed;
  for (auto it = cache_.lower_bound(prefix); it != cache_.end();) {
    if (it->first.size() < prefix.size() || !std::equal(prefix.begin(), prefix.end(), it->first.begin())) break;
    removed.push_back(it->second);
    key_.erase(it->second);
    it = cache_.erase(it);
  }
  for (const std::int32_t id : removed) {
    const auto in_lru = std::find(lru_.begin(), lru_.end(), id);
    if (in_lru != lru_.end()) {
      lru_.erase(in_lru);
      free_.insert(id);
    }
  }
}

void BlockAllocatorModel::release(std::int32_t block) {
  Block& b = blocks_[at(block)];
  if (--b.refcount > 0) return;
  if (key_.count(block) != 0) {
    lru_.push_back(block);
  } else {
    free_.insert(block);
  }
}

bool BlockAllocatorModel::try_register(Sequence& s, std::size_t index) {
  if (!prefix_cache_) return false;
  const std::int32_t id = s.table[index];
  const Block& b = blocks_[at(id)];
  if (b.filled != block_size_ || key_.count(id) != 0) return false;
  std::vector<std::int32_t> key;
  if (index > 0) {
    const std::vector<std::int32_t>* parent = key_of(s.table[index - 1]);
    if (parent == nullptr || static_cast<std::int64_t>(parent->size()) != static_cast<std::int64_t>(index) * block_size_) {
      return false;
    }
    key = *parent;
  }
  for (std::int64_t j = 0; j < block_size_; ++j) {
    const Slot& slot = b.slots[at(j)];
    if (!slot.live || slot.position != static_cast<std::int64_t>(index) * block_size_ + j) return false;
    key.push_back(slot.token);
  }
  if (cache_.count(key) != 0) return false;
  cache_[key] = id;
  key_[id] = key;
  return true;
}

bool BlockAllocatorModel::make_writable(Sequence& s, std::size_t index) {
  const std::int32_t id = s.table[index];
  if (blocks_[at(id)].refcount > 1) {
    if (available() < 1) return false;
    const std::int32_t copy = take();
    blocks_[at(copy)].filled = blocks_[at(id)].filled;
    blocks_[at(copy)].slots = blocks_[at(id)].slots;
    s.table[index] = copy;
    release(id);
  } else {
    uncache(id);
  }
  return true;
}

bool BlockAllocatorModel::append_end(Sequence& s, std::int32_t token) {
  const bool room = !s.table.empty() && blocks_[at(s.table.back())].filled < block_size_;
  if (room) {
    if (!make_writable(s, s.table.size() - 1)) return false;
  } else {
    if (available() < 1) return false;
    s.table.push_back(take());
  }
  Block& b = blocks_[at(s.table.back())];
  b.slots[at(b.filled)] = Slot{token, s.next_position++, true};
  ++b.filled;
  if (b.filled == block_size_) try_register(s, s.table.size() - 1);
  return true;
}

bool BlockAllocatorModel::admit(std::int64_t seq, const std::vector<std::int32_t>& prompt) {
  if (has(seq)) throw std::logic_error("model: admit of an existing sequence");
  const auto n = static_cast<std::int64_t>(prompt.size());
  const std::int64_t total = (n + block_size_ - 1) / block_size_;
  std::vector<std::int32_t> hits;
  if (prefix_cache_) {
    for (std::int64_t i = 0; i < n / block_size_; ++i) {
      const std::vector<std::int32_t> key(prompt.begin(), prompt.begin() + (i + 1) * block_size_);
      const auto it = cache_.find(key);
      if (it == cache_.end()) break;
      hits.push_back(it->second);
    }
  }
  std::int64_t idle_hits = 0;
  for (const std::int32_t h : hits) idle_hits += blocks_[at(h)].refcount == 0 ? 1 : 0;
  const std::int64_t need = total - static_cast<std::int64_t>(hits.size());
  if (need > available() - idle_hits) return false;
  Sequence s;
  for (const std::int32_t h : hits) {
    if (blocks_[at(h)].refcount == 0) lru_.remove(h);
    ++blocks_[at(h)].refcount;
    s.table.push_back(h);
  }
  for (std::int64_t i = static_cast<std::int64_t>(hits.size()); i < total; ++i) {
    const std::int32_t id = take();
    Block& b = blocks_[at(id)];
    b.filled = std::min(block_size_, n - i * block_size_);
    for (std::int64_t j = 0; j < b.filled; ++j) {
      b.slots[at(j)] = Slot{prompt[at(i * block_size_ + j)], static_cast<std::int32_t>(i * block_size_ + j), true};
    }
    s.table.push_back(id);
    try_register(s, at(i));
  }
  s.next_position = static_cast<std::int32_t>(n);
  seqs_[seq] = s;
  return true;
}

bool BlockAllocatorModel::append(std::int64_t seq, std::int32_t token) {
  Sequence& s = seqs_.at(seq);
  if (strategy_ == Strategy::kSlotReuse) {
    for (std::size_t i = 0; i < s.table.size(); ++i) {
      const Block& b = blocks_[at(s.table[i])];
      for (std::int64_t j = 0; j < b.filled; ++j) {
        if (b.slots[at(j)].live) continue;
        if (!make_writable(s, i)) return false;
        blocks_[at(s.table[i])].slots[at(j)] = Slot{token, s.next_position++, true};
        return true;
      }
    }
  }
  return append_end(s, token);
}

bool BlockAllocatorModel::evict(std::int64_t seq, std::int32_t position) {
  Sequence& s = seqs_.at(seq);
  std::size_t vi = 0;
  std::int64_t vj = -1;
  for (std::size_t i = 0; i < s.table.size() && vj < 0; ++i) {
    const Block& b = blocks_[at(s.table[i])];
    for (std::int64_t j = 0; j < b.filled; ++j) {
      if (b.slots[at(j)].live && b.slots[at(j)].position == position) {
        vi = i;
        vj = j;
        break;
      }
    }
  }
  if (vj < 0) throw std::logic_error("model: evict of a position that is not live");

  if (strategy_ == Strategy::kSparseCopy) {
    const std::int64_t live = live_count(seq) - 1;
    const std::int64_t need = (live + block_size_ - 1) / block_size_;
    if (need > available()) return false;
    std::vector<std::int32_t> dest;
    for (std::int64_t k = 0; k < need; ++k) dest.push_back(take());
    std::int64_t written = 0;
    for (std::size_t i = 0; i < s.table.size(); ++i) {
      const Block& b = blocks_[at(s.table[i])];
      for (std::int64_t j = 0; j < b.filled; ++j) {
        if (!b.slots[at(j)].live || (i == vi && j == vj)) continue;
        Block& d = blocks_[at(dest[at(written / block_size_)])];
        d.slots[at(written % block_size_)] = b.slots[at(j)];
        ++d.filled;
        ++written;
      }
    }
    for (auto it = s.table.rbegin(); it != s.table.rend(); ++it) release(*it);
    s.table = dest;
    copied_slots_ += live;
    preallocated_blocks_ += need;
    return true;
  }

  const bool frees = strategy_ == Strategy::kFreeBlock || strategy_ == Strategy::kSlotReuse;
  if (frees && live_in(s.table[vi]) == 1) {
    const std::int32_t id = s.table[vi];
    s.table.erase(s.table.begin() + static_cast<std::ptrdiff_t>(vi));
    release(id);
    return true;
  }
  if (!make_writable(s, vi)) return false;
  blocks_[at(s.table[vi])].slots[at(vj)].live = false;
  return true;
}

void BlockAllocatorModel::fork(std::int64_t parent, std::int64_t child) {
  if (has(child)) throw std::logic_error("model: fork into an existing sequence");
  const Sequence s = seqs_.at(parent);
  for (const std::int32_t id : s.table) ++blocks_[at(id)].refcount;
  seqs_[child] = s;
}

void BlockAllocatorModel::release_sequence(std::int64_t seq) {
  const Sequence s = seqs_.at(seq);
  seqs_.erase(seq);
  for (auto it = s.table.rbegin(); it != s.table.rend(); ++it) release(*it);
}

std::int64_t BlockAllocatorModel::cached_prefix_blocks(const std::vector<std::int32_t>& prompt) const {
  if (!prefix_cache_) return 0;
  const auto n = static_cast<std::int64_t>(prompt.size());
  std::int64_t hits = 0;
  for (std::int64_t i = 0; i < n / block_size_; ++i) {
    const std::vector<std::int32_t> key(prompt.begin(), prompt.begin() + (i + 1) * block_size_);
    if (cache_.count(key) == 0) break;
    ++hits;
  }
  return hits;
}

std::vector<std::pair<std::int32_t, std::int32_t>> BlockAllocatorModel::live_tokens(std::int64_t seq) const {
  std::vector<std::pair<std::int32_t, std::int32_t>> out;
  for (const std::int32_t id : seqs_.at(seq).table) {
    const Block& b = blocks_[at(id)];
    for (std::int64_t j = 0; j < b.filled; ++j) {
      if (b.slots[at(j)].live) out.emplace_back(b.slots[at(j)].position, b.slots[at(j)].token);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::int64_t BlockAllocatorModel::live_count(std::int64_t seq) const {
  return static_cast<std::int64_t>(live_tokens(seq).size());
}

}  // namespace kvcheck
