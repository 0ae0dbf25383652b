// The unified page pool.
#include "optimized/page_pool.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "kernels/cpu/page_codes.h"
#include "reference/errors.h"

namespace kvcheck {

std::vector<KvTier> leankv_default_tiers() {
  return {KvTier{int_format(per_token(8)), int_format(per_token(4))},
          KvTier{int_format(per_token(4)), int_format(per_token(2))}};
}

namespace {
constexpr std::byte kPoison{0xFF};
constexpr std::int64_t kMaskBits = 64;
}  // namespace

PagePool::PagePool(PagePoolConfig config) : config_(std::move(config)) {
  if (config_.pages <= 0 || config_.pages > INT32_MAX) {
    throw input_error("page pool", "pages", "must be in [1, {}], got {}", INT32_MAX, config_.pages);
  }
  if (config_.tiers.empty()) throw input_error("page pool", "tiers", "at least one tier is needed");
  std::int64_t max_tokens = 0;
  for (std::size_t t = 0; t < config_.tiers.size(); ++t) {
    const KvTier& tier = config_.tiers[t];
    const std::string where = fmt::format("page pool: tier {} ({})", t, kv_tier_name(tier));
    const FormatBytes k = format_bytes(tier.key, config_.head_dim);
    const FormatBytes v = format_bytes(tier.value, config_.head_dim);
    if (v.tokens_per_unit != 1) {
      throw input_error(where, "value format", "per-channel groups are for keys only (values are read per token)");
    }
    layouts_.push_back(page_layout(tier, config_.head_dim, config_.page_bytes));
    auto place = [](const FormatBytes& b) {
      return b.meta_bytes_per_page > 0 ? MetaPlace::kPage : b.tokens_per_unit > 1 ? MetaPlace::kGroup : MetaPlace::kSlot;
    };
    auto slot_meta = [](const FormatBytes& b) {
      return b.meta_bytes_per_page > 0 ? b.meta_bytes_per_page : b.tokens_per_unit > 1 ? 0 : b.meta_bytes_per_unit;
    };
    slot_sizes_.push_back({k.code_bytes_per_token, slot_meta(k), v.code_bytes_per_token, slot_meta(v),
                           key_code_tiling(tier.key, config_.head_dim), value_code_tiling(tier.value, config_.head_dim),
                           place(k), place(v), k.meta_bytes_per_unit, k.tokens_per_unit});
    if (t > 0 && layouts_[t].tokens < layouts_[t - 1].tokens) {
      throw input_error(where, "tokens per page", "{} is fewer than tier {}'s {} (a lower tier must hold more)",
                        layouts_[t].tokens, t - 1, layouts_[t - 1].tokens);
    }
    max_tokens = std::max(max_tokens, layouts_[t].tokens);
  }
  words_ = static_cast<std::size_t>((max_tokens + kMaskBits - 1) / kMaskBits);
  const auto n = static_cast<std::size_t>(config_.pages);
  owners_.assign(n, PageOwner{});
  masks_.assign(n * words_, 0);
  // Each pool's stamps from its own range (page_pool.h), every page starting at its first.
  static std::atomic<std::uint64_t> pools{0};
  clock_ = ((pools.fetch_add(1, std::memory_order_relaxed) + 1) << 40) + 1;
  versions_.assign(n, clock_);
  if (config_.backing) {
    const std::size_t size = n * static_cast<std::size_t>(config_.page_bytes);
    bytes_.reset(static_cast<std::byte*>(std::calloc(size, 1)));
    if (!bytes_) throw std::bad_alloc();
    if (config_.poison) std::fill_n(bytes_.get(), size, kPoison);
  }
}

void PagePool::require_backing(const char* what) const {
  if (!config_.backing) throw std::logic_error(std::string("page pool: ") + what + " needs a backed pool");
}

void PagePool::check_slot(PageId id, std::int64_t slot) const {
  if (id < 0 || id >= config_.pages) throw std::out_of_range(fmt::format("page pool: page {} out of range", id));
  const PageOwner& o = owner(id);
  if (o.free()) throw std::logic_error(fmt::format("page pool: page {} is free", id));
  if (slot < 0 || slot >= tokens_per_page(o.tier)) {
    throw std::out_of_range(fmt::format("page pool: slot {} of page {} (tier {}, {} slots)", slot, id, o.tier,
                                        tokens_per_page(o.tier)));
  }
}

void PagePool::format(PageId id, const PageOwner& owner) {
  if (owner.tier < 0 || owner.tier >= tiers()) throw std::out_of_range(fmt::format("page pool: tier {}", owner.tier));
  owners_[static_cast<std::size_t>(id)] = owner;
  std::fill(mask(id), mask(id) + words_, 0);
  touch(id);
  if (config_.backing && config_.poison) std::ranges::fill(raw_bytes(id), kPoison);
  const PageLayout& l = layout(owner.tier);
  if (config_.backing && l.key_range.bytes > 0) clear_page_key_range(l, raw_bytes(id).data());
}

void PagePool::release(PageId id) {
  owners_[static_cast<std::size_t>(id)] = PageOwner{};
  std::fill(mask(id), mask(id) + words_, 0);
  touch(id);
  if (config_.backing && config_.poison) std::ranges::fill(raw_bytes(id), kPoison);
}

void PagePool::copy_page(PageId from, PageId to) {
  if (owner(from).tier != owner(to).tier) {
    throw std::logic_error(fmt::format("page pool: copy of page {} (tier {}) to page {} (tier {})", from,
                                       owner(from).tier, to, owner(to).tier));
  }
  std::copy(mask(from), mask(from) + words_, mask(to));
  touch(to);
  if (config_.backing) std::ranges::copy(std::as_const(*this).bytes(from), raw_bytes(to).begin());
}

bool PagePool::live(PageId id, std::int64_t slot) const {
  const auto s = static_cast<std::size_t>(slot);
  return (mask(id)[s / kMaskBits] >> (s % kMaskBits)) & 1U;
}

std::int64_t PagePool::live_count(PageId id) const {
  std::int64_t n = 0;
  for (std::size_t w = 0; w < words_; ++w) n += std::popcount(mask(id)[w]);
  return n;
}

std::int64_t PagePool::first_dead_slot(PageId id) const {
  const std::int64_t slots = tokens_per_page(owner(id).tier);
  for (std::size_t w = 0; w < words_; ++w) {
    const std::uint64_t m = mask(id)[w];
    if (m != ~std::uint64_t{0}) {
      const auto s = static_cast<std::int64_t>(w) * kMaskBits + std::countr_one(m);
      return s < slots ? s : -1;
    }
  }
  return -1;
}

std::int64_t PagePool::last_live_slot(PageId id) const {
  for (std::size_t w = words_; w-- > 0;) {
    const std::uint64_t m = mask(id)[w];
    if (m != 0) return static_cast<std::int64_t>(w) * kMaskBits + 63 - std::countl_zero(m);
  }
  return -1;
}

std::int64_t PagePool::segment_offset(int tier, std::int64_t slot, Segment segment, std::int64_t* size) const {
  const PageLayout& l = layout(tier);
  const SlotSizes& s = slot_sizes_[static_cast<std::size_t>(tier)];
  switch (segment) {
    case Segment::kKeyMeta:
      *size = s.key_meta;
      return l.key_meta.offset + (s.key_place == MetaPlace::kSlot ? slot * s.key_meta : 0);
    case Segment::kValueMeta:
      *size = s.value_meta;
      return l.value_meta.offset + (s.value_place == MetaPlace::kSlot ? slot * s.value_meta : 0);
    case Segment::kScore: *size = kScoreBytes; return l.scores.offset + slot * kScoreBytes;
    case Segment::kPosition: *size = kPositionBytes; return l.positions.offset + slot * kPositionBytes;
  }
  return 0;
}

std::span<std::byte> PagePool::bytes(PageId id) {
  touch(id);
  return raw_bytes(id);
}

std::span<std::byte> PagePool::raw_bytes(PageId id) {
  require_backing("bytes");
  return {bytes_.get() + static_cast<std::size_t>(id) * static_cast<std::size_t>(config_.page_bytes),
          static_cast<std::size_t>(config_.page_bytes)};
}

std::span<const std::byte> PagePool::bytes(PageId id) const {
  require_backing("bytes");
  return {bytes_.get() + static_cast<std::size_t>(id) * static_cast<std::size_t>(config_.page_bytes),
          static_cast<std::size_t>(config_.page_bytes)};
}

std::span<std::byte> PagePool::slot_bytes(PageId id, std::int64_t slot, Segment segment) {
  check_slot(id, slot);
  std::int64_t size = 0;
  const std::int64_t offset = segment_offset(owner(id).tier, slot, segment, &size);
  return raw_bytes(id).subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(size));
}

std::span<const std::byte> PagePool::slot_bytes(PageId id, std::int64_t slot, Segment segment) const {
  check_slot(id, slot);
  std::int64_t size = 0;
  const std::int64_t offset = segment_offset(owner(id).tier, slot, segment, &size);
  return bytes(id).subspan(static_cast<std::size_t>(offset), static_cast<std::size_t>(size));
}

PagePool::SlotCodes PagePool::empty_codes(int tier) const {
  const SlotSizes& s = slot_sizes_[static_cast<std::size_t>(tier)];
  SlotCodes c;
  c.key.resize(static_cast<std::size_t>(s.key_codes));
  c.key_meta.resize(static_cast<std::size_t>(s.key_meta));
  c.value.resize(static_cast<std::size_t>(s.value_codes));
  c.value_meta.resize(static_cast<std::size_t>(s.value_meta));
  return c;
}

void PagePool::store_codes(PageId id, std::int64_t slot, const SlotCodes& codes) {
  check_slot(id, slot);
  require_backing("store_codes");
  const int tier = owner(id).tier;
  const SlotSizes& s = slot_sizes_[static_cast<std::size_t>(tier)];
  const PageLayout& l = layout(tier);
  touch(id);
  const std::span<std::byte> page = raw_bytes(id);
  auto segment = [&](const PageSegment& g) {
    return std::span<std::uint8_t>(reinterpret_cast<std::uint8_t*>(page.data()) + g.offset,
                                   static_cast<std::size_t>(g.bytes));
  };
  store_key_row(segment(l.key_codes), s.key_tiling, l.tokens, slot, codes.key);
  store_value_row(segment(l.value_codes), s.value_tiling, l.tokens, slot, codes.value);
  auto put_meta = [&](Segment g, const std::vector<std::uint8_t>& meta) {
    const std::span<std::byte> dst = slot_bytes(id, slot, g);
    if (meta.size() != dst.size()) {
      throw std::logic_error(fmt::format("page pool: metadata of {} bytes for a slot of {}", meta.size(), dst.size()));
    }
    if (!meta.empty()) std::memcpy(dst.data(), meta.data(), meta.size());  // fp16 / fp32: none (data() may be null)
  };
  put_meta(Segment::kKeyMeta, codes.key_meta);
  put_meta(Segment::kValueMeta, codes.value_meta);
  if (l.key_range.bytes > 0) {
    std::vector<std::uint16_t> key(codes.key.size() / 2);
    std::memcpy(key.data(), codes.key.data(), key.size() * 2);
    widen_page_key_range(l, page.data(), key);
  }
}

PagePool::SlotCodes PagePool::load_codes(PageId id, std::int64_t slot) const {
  check_slot(id, slot);
  require_backing("load_codes");
  const int tier = owner(id).tier;
  const SlotSizes& s = slot_sizes_[static_cast<std::size_t>(tier)];
  const PageLayout& l = layout(tier);
  const std::span<const std::byte> page = bytes(id);
  auto segment = [&](const PageSegment& g) {
    return std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(page.data()) + g.offset,
                                         static_cast<std::size_t>(g.bytes));
  };
  SlotCodes c = empty_codes(tier);
  load_key_row(segment(l.key_codes), s.key_tiling, l.tokens, slot, c.key);
  load_value_row(segment(l.value_codes), s.value_tiling, l.tokens, slot, c.value);
  auto get_meta = [&](Segment g, std::vector<std::uint8_t>& meta) {
    const std::span<const std::byte> src = slot_bytes(id, slot, g);
    if (!src.empty()) std::memcpy(meta.data(), src.data(), src.size());
  };
  get_meta(Segment::kKeyMeta, c.key_meta);
  get_meta(Segment::kValueMeta, c.value_meta);
  return c;
}

void PagePool::put(PageId id, std::int64_t slot, const TokenPayload& payload) {
  check_slot(id, slot);
  const auto s = static_cast<std::size_t>(slot);
  touch(id);
  mask(id)[s / kMaskBits] |= std::uint64_t{1} << (s % kMaskBits);
  if (!config_.backing) return;
  std::memcpy(slot_bytes(id, slot, Segment::kPosition).data(), &payload.position, sizeof payload.position);
  std::memcpy(slot_bytes(id, slot, Segment::kScore).data(), &payload.score, sizeof payload.score);
}

void PagePool::add_score(PageId id, std::int64_t slot, float delta) {
  check_slot(id, slot);
  require_backing("add_score");
  // No restamp: decode attention does not read scores (the stamps' contract, page_pool.h).
  const std::span<std::byte> at = slot_bytes(id, slot, Segment::kScore);
  float score = 0.0f;
  std::memcpy(&score, at.data(), sizeof score);
  score += delta;
  std::memcpy(at.data(), &score, sizeof score);
}

void PagePool::kill(PageId id, std::int64_t slot) {
  check_slot(id, slot);
  const auto s = static_cast<std::size_t>(slot);
  mask(id)[s / kMaskBits] &= ~(std::uint64_t{1} << (s % kMaskBits));
  touch(id);
  if (!config_.backing || !config_.poison) return;
  const int tier = owner(id).tier;
  const SlotSizes& sizes = slot_sizes_[static_cast<std::size_t>(tier)];
  const PageLayout& l = layout(tier);
  SlotCodes poison = empty_codes(tier);
  for (auto* v : {&poison.key, &poison.value}) std::ranges::fill(*v, std::to_integer<std::uint8_t>(kPoison));
  auto* page = reinterpret_cast<std::uint8_t*>(raw_bytes(id).data());
  store_key_row({page + l.key_codes.offset, static_cast<std::size_t>(l.key_codes.bytes)}, sizes.key_tiling, l.tokens,
                slot, poison.key);
  store_value_row({page + l.value_codes.offset, static_cast<std::size_t>(l.value_codes.bytes)}, sizes.value_tiling,
                  l.tokens, slot, poison.value);
  // A page's scale (FP8) and a channel group's metadata (KIVI keys) serve the other slots too.
  if (sizes.key_place == MetaPlace::kSlot) std::ranges::fill(slot_bytes(id, slot, Segment::kKeyMeta), kPoison);
  if (sizes.value_place == MetaPlace::kSlot) std::ranges::fill(slot_bytes(id, slot, Segment::kValueMeta), kPoison);
  for (Segment g : {Segment::kScore, Segment::kPosition}) std::ranges::fill(slot_bytes(id, slot, g), kPoison);
}

void PagePool::move(PageId from, std::int64_t from_slot, PageId to, std::int64_t to_slot) {
  check_slot(from, from_slot);
  check_slot(to, to_slot);
  if (owner(from).tier != owner(to).tier) throw std::logic_error("page pool: move between tiers");
  if (slot_sizes_[static_cast<std::size_t>(owner(from).tier)].key_place == MetaPlace::kGroup) {
    throw std::logic_error(fmt::format("page pool: a slot of a per-channel key tier cannot move (its group's "
                                       "metadata stays behind): page {} slot {}", from, from_slot));
  }
  const auto s = static_cast<std::size_t>(to_slot);
  mask(to)[s / kMaskBits] |= std::uint64_t{1} << (s % kMaskBits);
  touch(to);
  if (config_.backing) {
    store_codes(to, to_slot, load_codes(from, from_slot));
    for (Segment g : {Segment::kScore, Segment::kPosition}) {
      const std::span<std::byte> src = slot_bytes(from, from_slot, g);
      std::memcpy(slot_bytes(to, to_slot, g).data(), src.data(), src.size());
    }
  }
  kill(from, from_slot);
}

std::int64_t PagePool::key_group_tokens(int tier) const {
  return slot_sizes_[static_cast<std::size_t>(tier)].key_group_tokens;
}

void PagePool::store_key_group_meta(PageId id, std::int64_t first_slot, std::span<const std::uint8_t> meta) {
  check_slot(id, first_slot);
  require_backing("store_key_group_meta");
  const int tier = owner(id).tier;
  const SlotSizes& s = slot_sizes_[static_cast<std::size_t>(tier)];
  if (s.key_place != MetaPlace::kGroup || first_slot % s.key_group_tokens != 0 ||
      static_cast<std::int64_t>(meta.size()) != s.key_group_meta) {
    throw std::logic_error(fmt::format("page pool: group metadata of {} bytes at slot {} of page {} (tier {}: {} "
                                       "bytes per group of {} slots, per-channel keys only)", meta.size(), first_slot,
                                       id, tier, s.key_group_meta, s.key_group_tokens));
  }
  const std::int64_t at = layout(tier).key_meta.offset + first_slot / s.key_group_tokens * s.key_group_meta;
  touch(id);
  std::memcpy(raw_bytes(id).data() + at, meta.data(), meta.size());
}

std::vector<std::uint8_t> PagePool::load_key_group_meta(PageId id, std::int64_t first_slot) const {
  check_slot(id, first_slot);
  require_backing("load_key_group_meta");
  const int tier = owner(id).tier;
  const SlotSizes& s = slot_sizes_[static_cast<std::size_t>(tier)];
  if (s.key_place != MetaPlace::kGroup || first_slot % s.key_group_tokens != 0) {
    throw std::logic_error(fmt::format("page pool: no group metadata at slot {} of page {}", first_slot, id));
  }
  const std::int64_t at = layout(tier).key_meta.offset + first_slot / s.key_group_tokens * s.key_group_meta;
  const auto* b = reinterpret_cast<const std::uint8_t*>(bytes(id).data()) + at;
  return {b, b + s.key_group_meta};
}

TokenPayload PagePool::payload(PageId id, std::int64_t slot) const {
  require_backing("payload");
  if (owner(id).free()) throw std::logic_error(fmt::format("page pool: page {} is free", id));
  TokenPayload p;
  std::int64_t size = 0;
  const int tier = owner(id).tier;
  const std::span<const std::byte> b = bytes(id);
  std::memcpy(&p.position, b.data() + segment_offset(tier, slot, Segment::kPosition, &size), sizeof p.position);
  std::memcpy(&p.score, b.data() + segment_offset(tier, slot, Segment::kScore, &size), sizeof p.score);
  return p;
}

}  // namespace kvcheck
