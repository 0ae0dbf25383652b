#include "optimized/block_allocator.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <string>

#include <fmt/format.h>

#include "optimized/pool_exhausted.h"
#include "reference/errors.h"

namespace kvcheck {

namespace {

std::string seq_name(SeqId seq) { return fmt::format("sequence {}", seq); }

}  // namespace

BlockAllocator::BlockAllocator(const BlockAllocatorConfig& config)
    : config_(config), cache_(std::max<std::int64_t>(config.num_blocks, 0), config.hash_bits) {
  if (config.num_blocks < 1 || config.num_blocks > (std::int64_t{1} << 30)) {
    throw input_error("block allocator", "num_blocks", "must be in [1, 2^30], got {}", config.num_blocks);
  }
  if (config.block_size < 1 || config.block_size > 64) {
    throw input_error("block allocator", "block_size", "must be in [1, 64] (one 64-bit live mask per block), got {}",
                      config.block_size);
  }
  if (config.hash_bits < 1 || config.hash_bits > 64) {
    throw input_error("block allocator", "hash_bits", "must be in [1, 64], got {}", config.hash_bits);
  }
  blocks_.resize(static_cast<std::size_t>(config.num_blocks));
  slots_.resize(static_cast<std::size_t>(config.num_blocks * config.block_size));
  free_heap_.reserve(blocks_.size());
  for (std::int64_t b = 0; b < config.num_blocks; ++b) free_heap_.push_back(static_cast<BlockId>(b));
  // Ascending ids are a valid min-heap already.
}

const BlockAllocator::Sequence& BlockAllocator::get(SeqId seq) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw input_error(seq_name(seq), "block table", "no such sequence");
  return it->second;
}

BlockAllocator::Sequence& BlockAllocator::get(SeqId seq) {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw input_error(seq_name(seq), "block table", "no such sequence");
  return it->second;
}

std::vector<SeqId> BlockAllocator::sequences() const {
  std::vector<SeqId> out;
  out.reserve(seqs_.size());
  for (const auto& [id, s] : seqs_) out.push_back(id);
  std::sort(out.begin(), out.end());
  return out;
}

void BlockAllocator::check_available(const char* what, SeqId seq, std::int64_t needed) const {
  if (needed > available()) throw PoolExhausted(fmt::format("{} of {}", what, seq_name(seq)), needed, available());
}

void BlockAllocator::note_used() { peak_used_ = std::max(peak_used_, used_count()); }

void BlockAllocator::poison_block(BlockId b) {
  if (!config_.poison) return;
  for (std::int64_t j = 0; j < config_.block_size; ++j) slot(b, j) = SlotPayload{};
}

BlockId BlockAllocator::take() {
  BlockId id = kNoBlock;
  if (!free_heap_.empty()) {
    std::pop_heap(free_heap_.begin(), free_heap_.end(), std::greater<>());
    id = free_heap_.back();
    free_heap_.pop_back();
  } else {
    id = cache_.oldest_idle();
    // The oldest idle block and its idle descendants leave the cache; the descendants are free.
    for (const BlockId d : cache_.erase_subtree(id)) {
      if (d != id) to_free_list(d);
    }
    poison_block(id);
  }
  Block& blk = blocks_[index(id)];
  blk.refcount = 1;
  blk.filled = 0;
  blk.live = 0;
  return id;
}

void BlockAllocator::to_free_list(BlockId b) {
  blocks_[index(b)].filled = 0;
  blocks_[index(b)].live = 0;
  poison_block(b);
  free_heap_.push_back(b);
  std::push_heap(free_heap_.begin(), free_heap_.end(), std::greater<>());
}

void BlockAllocator::release(BlockId b) {
  Block& blk = blocks_[index(b)];
  if (--blk.refcount > 0) return;
  if (cache_.contains(b)) {
    cache_.push_idle(b);
  } else {
    to_free_list(b);
  }
}

void BlockAllocator::release_table(const std::vector<BlockId>& table) {
  for (auto it = table.rbegin(); it != table.rend(); ++it) release(*it);
}

void BlockAllocator::write(Sequence& s, BlockId b, std::int64_t j, std::int32_t token, std::int32_t position) {
  slot(b, j) = SlotPayload{token, position};
  blocks_[index(b)].live |= std::uint64_t{1} << j;
  ++s.live;
  const auto p = static_cast<std::size_t>(position);
  if (s.where.size() <= p) s.where.resize(p + 1, -1);
  s.where[p] = static_cast<std::int64_t>(b) * config_.block_size + j;
}

void BlockAllocator::make_writable(Sequence& s, std::size_t i) {
  const BlockId old = s.table[i];
  if (!needs_copy(old)) {
    // The only owner writes in place; a cached block leaves the cache with its descendants.
    if (cache_.contains(old)) {
      for (const BlockId d : cache_.erase_subtree(old)) to_free_list(d);
    }
    return;
  }
  // Copy-on-write: exactly this block is copied; the old one loses this sequence's reference.
  const BlockId copy = take();
  const Block& from = blocks_[index(old)];
  Block& to = blocks_[index(copy)];
  to.filled = from.filled;
  to.live = from.live;
  for (std::int64_t j = 0; j < config_.block_size; ++j) {
    slot(copy, j) = slot(old, j);
    if ((to.live >> j) & 1U) s.where[static_cast<std::size_t>(slot(copy, j).position)] = static_cast<std::int64_t>(copy) * config_.block_size + j;
  }
  s.table[i] = copy;
  release(old);
  ++cow_copies_;
  note_used();
}

void BlockAllocator::try_register(Sequence& s, std::size_t i) {
  if (!config_.prefix_cache) return;
  const BlockId b = s.table[i];
  const Block& blk = blocks_[index(b)];
  const std::int64_t bs = config_.block_size;
  const std::uint64_t all = bs == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << bs) - 1);
  if (blk.filled != bs || blk.live != all || cache_.contains(b)) return;
  const auto base = static_cast<std::int64_t>(i) * bs;
  BlockId parent = kNoBlock;
  if (i > 0) {
    parent = s.table[i - 1];
    if (!cache_.contains(parent) || slot(parent, 0).position != base - bs) return;
  }
  std::int32_t tokens[64];
  for (std::int64_t j = 0; j < bs; ++j) {
    if (slot(b, j).position != base + j) return;
    tokens[j] = slot(b, j).token;
  }
  cache_.insert(parent, b, std::span<const std::int32_t>(tokens, static_cast<std::size_t>(bs)));
}

void BlockAllocator::admit(SeqId seq, std::span<const std::int32_t> prompt) {
  if (seqs_.count(seq) != 0) throw input_error(seq_name(seq), "admit", "already has a block table");
  const std::int64_t bs = config_.block_size;
  const auto n = static_cast<std::int64_t>(prompt.size());
  if (n > std::int64_t{1} << 30) throw input_error(seq_name(seq), "admit", "prompt of {} tokens is too long", n);
  const std::int64_t total = (n + bs - 1) / bs;
  std::vector<BlockId> hits;
  if (config_.prefix_cache) {
    BlockId parent = kNoBlock;
    for (std::int64_t i = 0; i < n / bs; ++i) {
      const BlockId b = cache_.find(parent, prompt.subspan(static_cast<std::size_t>(i * bs), static_cast<std::size_t>(bs)));
      if (b == kNoBlock) break;
      hits.push_back(b);
      parent = b;
    }
  }
  std::int64_t idle_hits = 0;
  for (const BlockId h : hits) idle_hits += cache_.is_idle(h) ? 1 : 0;
  const std::int64_t need = total - static_cast<std::int64_t>(hits.size());
  if (need > available() - idle_hits) {
    throw PoolExhausted(fmt::format("admit of {} ({} prompt tokens, {} cached blocks)", seq_name(seq), n, hits.size()),
                        need, available() - idle_hits);
  }
  Sequence s;
  s.table.reserve(static_cast<std::size_t>(total));
  s.where.assign(static_cast<std::size_t>(n), -1);
  for (std::size_t i = 0; i < hits.size(); ++i) {
    const BlockId h = hits[i];
    cache_.remove_idle(h);
    ++blocks_[index(h)].refcount;
    s.table.push_back(h);
    for (std::int64_t j = 0; j < bs; ++j) s.where[i * static_cast<std::size_t>(bs) + static_cast<std::size_t>(j)] = static_cast<std::int64_t>(h) * bs + j;
    s.live += bs;
  }
  for (auto i = static_cast<std::int64_t>(hits.size()); i < total; ++i) {
    const BlockId b = take();
    const std::int64_t fill = std::min(bs, n - i * bs);
    for (std::int64_t j = 0; j < fill; ++j) {
      write(s, b, j, prompt[static_cast<std::size_t>(i * bs + j)], static_cast<std::int32_t>(i * bs + j));
    }
    blocks_[index(b)].filled = fill;
    s.table.push_back(b);
    try_register(s, static_cast<std::size_t>(i));
  }
  s.next_position = static_cast<std::int32_t>(n);
  seqs_.emplace(seq, std::move(s));
  note_used();
}

void BlockAllocator::append(SeqId seq, std::int32_t token) {
  Sequence& s = get(seq);
  const bool room = !s.table.empty() && blocks_[index(s.table.back())].filled < config_.block_size;
  if (room) {
    if (needs_copy(s.table.back())) check_available("copy-on-write append", seq, 1);
    make_writable(s, s.table.size() - 1);
  } else {
    check_available("append", seq, 1);
    s.table.push_back(take());
    note_used();
  }
  const BlockId b = s.table.back();
  Block& blk = blocks_[index(b)];
  write(s, b, blk.filled, token, s.next_position++);
  ++blk.filled;
  if (blk.filled == config_.block_size) try_register(s, s.table.size() - 1);
}

bool BlockAllocator::reuse_dead_slot(SeqId seq, std::int32_t token) {
  Sequence& s = get(seq);
  for (std::size_t i = 0; i < s.table.size(); ++i) {
    const Block& blk = blocks_[index(s.table[i])];
    const std::uint64_t written = blk.filled == 64 ? ~std::uint64_t{0} : ((std::uint64_t{1} << blk.filled) - 1);
    const std::uint64_t dead = written & ~blk.live;
    if (dead == 0) continue;
    if (needs_copy(s.table[i])) check_available("copy-on-write slot reuse", seq, 1);
    make_writable(s, i);
    write(s, s.table[i], std::countr_zero(dead), token, s.next_position++);
    return true;
  }
  return false;
}

std::pair<std::size_t, std::int64_t> BlockAllocator::locate(SeqId seq, const Sequence& s, std::int32_t position,
                                                            const char* what) const {
  const auto p = static_cast<std::size_t>(position);
  if (position < 0 || p >= s.where.size() || s.where[p] < 0) {
    throw input_error(seq_name(seq), what, "position {} is not live", position);
  }
  const auto b = static_cast<BlockId>(s.where[p] / config_.block_size);
  const auto it = std::find(s.table.begin(), s.table.end(), b);
  return {static_cast<std::size_t>(it - s.table.begin()), s.where[p] % config_.block_size};
}

void BlockAllocator::evict(SeqId seq, std::int32_t position, bool free_empty_block) {
  Sequence& s = get(seq);
  const auto [i, j] = locate(seq, s, position, "evict");
  const BlockId b = s.table[i];
  if (free_empty_block && std::popcount(blocks_[index(b)].live) == 1) {
    s.table.erase(s.table.begin() + static_cast<std::ptrdiff_t>(i));
    s.where[static_cast<std::size_t>(position)] = -1;
    --s.live;
    release(b);
    return;
  }
  if (needs_copy(b)) check_available("copy-on-write eviction", seq, 1);
  make_writable(s, i);
  const BlockId w = s.table[i];
  blocks_[index(w)].live &= ~(std::uint64_t{1} << j);
  if (config_.poison) slot(w, j) = SlotPayload{};
  s.where[static_cast<std::size_t>(position)] = -1;
  --s.live;
}

std::int64_t BlockAllocator::compact_without(SeqId seq, std::int32_t position) {
  Sequence& s = get(seq);
  const auto [vi, vj] = locate(seq, s, position, "sparse copy");
  const std::int64_t bs = config_.block_size;
  const std::int64_t live = s.live - 1;
  const std::int64_t need = (live + bs - 1) / bs;
  check_available("sparse-copy pre-allocation", seq, need);
  std::vector<BlockId> dest;
  dest.reserve(static_cast<std::size_t>(need));
  for (std::int64_t k = 0; k < need; ++k) dest.push_back(take());
  note_used();
  const std::vector<BlockId> old = std::move(s.table);
  s.live = 0;
  s.where[static_cast<std::size_t>(position)] = -1;  // every other live position is rewritten below
  std::int64_t written = 0;
  for (std::size_t i = 0; i < old.size(); ++i) {
    const std::uint64_t mask = blocks_[index(old[i])].live;
    for (std::uint64_t m = mask; m != 0; m &= m - 1) {
      const int j = std::countr_zero(m);
      if (i == vi && j == vj) continue;
      const BlockId d = dest[static_cast<std::size_t>(written / bs)];
      const SlotPayload& from = slot(old[i], j);
      write(s, d, written % bs, from.token, from.position);
      ++blocks_[index(d)].filled;
      ++written;
    }
  }
  s.table = dest;
  release_table(old);
  return need;
}

void BlockAllocator::fork(SeqId parent, SeqId child) {
  if (seqs_.count(child) != 0) throw input_error(seq_name(child), "fork", "already has a block table");
  Sequence s = get(parent);
  for (const BlockId b : s.table) ++blocks_[index(b)].refcount;
  seqs_.emplace(child, std::move(s));
}

void BlockAllocator::free_sequence(SeqId seq) {
  const Sequence& s = get(seq);
  release_table(s.table);
  seqs_.erase(seq);
}

std::vector<SlotPayload> BlockAllocator::preempt(SeqId seq) {
  const Sequence& s = get(seq);
  std::vector<SlotPayload> out;
  out.reserve(static_cast<std::size_t>(s.live));
  for (const std::int64_t w : s.where) {
    if (w >= 0) out.push_back(slot(static_cast<BlockId>(w / config_.block_size), w % config_.block_size));
  }
  free_sequence(seq);
  return out;
}

std::int64_t BlockAllocator::cached_prefix_blocks(std::span<const std::int32_t> prompt) const {
  if (!config_.prefix_cache) return 0;
  const std::int64_t bs = config_.block_size;
  const auto n = static_cast<std::int64_t>(prompt.size());
  BlockId parent = kNoBlock;
  std::int64_t hits = 0;
  for (std::int64_t i = 0; i < n / bs; ++i) {
    parent = cache_.find(parent, prompt.subspan(static_cast<std::size_t>(i * bs), static_cast<std::size_t>(bs)));
    if (parent == kNoBlock) break;
    ++hits;
  }
  return hits;
}

}  // namespace kvcheck
