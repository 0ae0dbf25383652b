// The unified page pool (docs/design.md §5; LeanKV section 5.2): `pages` pages of
// `page_bytes` bytes each (really allocated, one buffer), each formatted on allocation for one
// precision tier of one (request, layer, kv-head). A page's tokens sit in the six segments of
// kernels/cpu/kv_bytes.h page_layout(tier, head_dim, page_bytes); slot s of a page is token s of
// every segment. A per-page bitset marks the live slots.
//
// Tiers are indexed: tier 0 high, tier 1 low (LeanKV's K8V4 / K4V2 per-token INT by default).
// Slots move between pages (compaction) byte for byte with their per-slot metadata (per-token and
// per-token-group INT). FP8's fp32 scale is the head's, one copy per page: a slot's SlotCodes
// carry it and storing a slot rewrites it. Per-channel keys (KIVI) keep one metadata block per
// group of G slots, written by store_key_group_meta; such slots never move (move throws).
// A key-range tier's page (Quest) holds its keys' per-channel fp16 min and max: emptied when the
// page is formatted, widened by every store_codes, never narrowed (a killed or moved slot's key
// stays inside it, so it remains an upper bound of the live keys).
//
// Poison (for tests): free pages and dead slots are filled with 0xFF bytes: NaN in the fp32 score
// segment, -1 in the int32 position segment. A live slot whose payload reads back intact was
// never overwritten by a free page or a dead slot.
//
// Versions: every page carries a stamp that changes whenever its live mask or any byte other than
// its slots' scores changes (format, release, copy_page's target, put, kill, move's two pages,
// store_codes, store_key_group_meta, and any write through bytes()), so a copy of the pool
// elsewhere (a device's: optimized/pool_mirror.h) knows which pages to copy again. add_score, the
// one write of a score alone, leaves it: decode attention does not read scores, and an
// accumulating policy would otherwise restamp every page every step.
//
// backing = false keeps only the metadata (owners, live masks) for benchmarks at a scale whose
// bytes would not fit; payload accessors then throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "kernels/cpu/kv_bytes.h"
#include "optimized/free_page_list.h"
#include "optimized/page_table.h"

namespace kvcheck {

// What a slot holds besides its codes: the token position and its score.
struct TokenPayload {
  std::int32_t position = 0;
  float score = 0.0f;
  bool operator==(const TokenPayload&) const = default;
};

struct PageOwner {
  HeadKey head;
  int tier = -1;  // -1: free
  bool free() const { return tier < 0; }
};

// LeanKV's defaults: high K8V4, low K4V2, per-token INT for keys and values.
std::vector<KvTier> leankv_default_tiers();

struct PagePoolConfig {
  std::int64_t pages = 0;
  std::int64_t page_bytes = 16 * 1024;
  std::int64_t head_dim = 128;
  std::vector<KvTier> tiers = leankv_default_tiers();
  bool poison = false;
  bool backing = true;
};

class PagePool {
 public:
  // InputError for a bad config (no pages, a tier that fits no token, per-channel values, fewer
  // tokens per low page than per high page).
  explicit PagePool(PagePoolConfig config);

  const PagePoolConfig& config() const { return config_; }
  std::int64_t pages() const { return config_.pages; }
  std::int64_t page_bytes() const { return config_.page_bytes; }
  int tiers() const { return static_cast<int>(layouts_.size()); }
  const PageLayout& layout(int tier) const { return layouts_[static_cast<std::size_t>(tier)]; }
  std::int64_t tokens_per_page(int tier) const { return layout(tier).tokens; }
  bool backed() const { return config_.backing; }

  // Formats a page for `owner` (tier owner.tier), every slot dead (poisoned when poison is on).
  void format(PageId id, const PageOwner& owner);
  // Returns a page to the free state: no owner, every slot dead, poisoned when poison is on.
  void release(PageId id);
  // Copy-on-write of a shared page: `to` (formatted for the same tier) gets `from`'s live mask
  // and every byte (codes, per-slot, per-page and per-group metadata), so it reads identically.
  void copy_page(PageId from, PageId to);
  const PageOwner& owner(PageId id) const { return owners_[static_cast<std::size_t>(id)]; }

  bool live(PageId id, std::int64_t slot) const;
  std::int64_t live_count(PageId id) const;
  // 64-bit words of every page's live-slot bitset.
  std::int64_t mask_words() const { return static_cast<std::int64_t>(words_); }
  // The page's live-slot bitset for kernels: bit s % 64 of word s / 64 is slot s.
  std::span<const std::uint64_t> live_mask(PageId id) const {
    return {mask(id), words_};
  }
  // The lowest dead slot, or -1 when every slot is live.
  std::int64_t first_dead_slot(PageId id) const;
  // The highest live slot, or -1 when none is live.
  std::int64_t last_live_slot(PageId id) const;
  // Marks a slot live and writes its position and score (its codes: store_codes).
  void put(PageId id, std::int64_t slot, const TokenPayload& payload);
  // Adds delta to a slot's score (an accumulating policy's attention mass), in float; the page
  // keeps its stamp.
  void add_score(PageId id, std::int64_t slot, float delta);
  // Marks a slot dead (poisoned when poison is on).
  void kill(PageId id, std::int64_t slot);
  // Copies a live slot to a dead slot of a page of the same tier (every segment), then kills it.
  void move(PageId from, std::int64_t from_slot, PageId to, std::int64_t to_slot);
  TokenPayload payload(PageId id, std::int64_t slot) const;

  // A slot's key and value code rows (the quantizer's [head_dim / codes_per_byte] bytes, or the
  // fp16/fp32 elements), stored in and read from the tiled layouts of kernels/cpu/page_codes.h, and
  // its key and value metadata (fp16 scale and zero pairs of the per-token formats; FP8's fp32 page
  // scale; nothing for per-channel keys).
  struct SlotCodes {
    std::vector<std::uint8_t> key, key_meta, value, value_meta;
    bool operator==(const SlotCodes&) const = default;
  };
  void store_codes(PageId id, std::int64_t slot, const SlotCodes& codes);
  SlotCodes load_codes(PageId id, std::int64_t slot) const;
  // Row sizes of a tier, for callers that fill SlotCodes.
  SlotCodes empty_codes(int tier) const;
  // Per-channel key tiers: G (slots per metadata group; 1 for the other formats), and the
  // [head_dim] (scale, zero) fp16 pairs of the group that starts at first_slot (a multiple of G).
  std::int64_t key_group_tokens(int tier) const;
  void store_key_group_meta(PageId id, std::int64_t first_slot, std::span<const std::uint8_t> meta);
  std::vector<std::uint8_t> load_key_group_meta(PageId id, std::int64_t first_slot) const;

  // The bytes of a page (writing through the first restamps the page).
  std::span<std::byte> bytes(PageId id);
  std::span<const std::byte> bytes(PageId id) const;
  // The page's stamp (see above): equal stamps, equal live mask and bytes but for scores. Stamps
  // come from one counter per pool, started at its own 2^40 boundary, so a page never takes a
  // stamp it held before, nor one a page of another pool in the process holds, and none is 0.
  std::uint64_t version(PageId id) const { return versions_[static_cast<std::size_t>(id)]; }

 private:
  // Where a part's metadata lives: per slot, once per page (FP8), per group of slots (KIVI keys).
  enum class MetaPlace { kSlot, kPage, kGroup };
  struct SlotSizes {
    std::int64_t key_codes, key_meta, value_codes, value_meta;  // *_meta: the bytes a SlotCodes carries
    CodeTiling key_tiling, value_tiling;
    MetaPlace key_place, value_place;
    std::int64_t key_group_meta, key_group_tokens;
  };
  // The per-slot contiguous segments (metadata, score, position); codes are tiled.
  enum class Segment { kKeyMeta, kValueMeta, kScore, kPosition };
  std::span<std::byte> slot_bytes(PageId id, std::int64_t slot, Segment segment);
  std::span<const std::byte> slot_bytes(PageId id, std::int64_t slot, Segment segment) const;
  // bytes() without the restamp, for the members that stamp what they change themselves.
  std::span<std::byte> raw_bytes(PageId id);
  void touch(PageId id) { versions_[static_cast<std::size_t>(id)] = ++clock_; }
  std::uint64_t* mask(PageId id) { return masks_.data() + static_cast<std::size_t>(id) * words_; }
  const std::uint64_t* mask(PageId id) const { return masks_.data() + static_cast<std::size_t>(id) * words_; }
  std::int64_t segment_offset(int tier, std::int64_t slot, Segment segment, std::int64_t* size) const;
  void check_slot(PageId id, std::int64_t slot) const;
  void require_backing(const char* what) const;

  PagePoolConfig config_;
  std::vector<PageLayout> layouts_;
  std::vector<SlotSizes> slot_sizes_;
  std::size_t words_ = 0;  // mask words per page
  std::vector<PageOwner> owners_;
  std::vector<std::uint64_t> masks_;
  std::vector<std::uint64_t> versions_;
  std::uint64_t clock_ = 0;
  // The pages' bytes, calloc'ed: a large pool comes as untouched zero pages from the OS, so a
  // pool sized for full context costs only the pages a run writes (a vector's value-initialization
  // wrote every byte of it up front).
  struct FreeBytes {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte[], FreeBytes> bytes_;
};

}  // namespace kvcheck
