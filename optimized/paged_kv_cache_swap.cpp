// Preemption by swap (PagedKvCache::swap_out / swap_in): a request's stored slots copied out to
// host memory byte for byte, and back into fresh pages in the same walk order.
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "optimized/paged_kv_cache.h"

namespace kvcheck {

std::int64_t PagedKvCache::Swapped::bytes() const {
  std::int64_t n = 0;
  for (const PagePool::SlotCodes& s : slots) {
    n += static_cast<std::int64_t>(s.key.size() + s.key_meta.size() + s.value.size() + s.value_meta.size());
  }
  return n;
}

PagedKvCache::Swapped PagedKvCache::swap_out(std::int64_t request) {
  if (!policy_.swappable()) {
    throw std::logic_error(fmt::format("paged KV cache: swap-out of request {} under policy {}: only uniform "
                                       "policies keep a head's positions packed in one tier", request,
                                       policy_.name()));
  }
  Swapped out;
  out.tokens = tokens(request);
  const PagePool& pool = manager_.pool();
  for (std::int32_t l = 0; l < model_.num_hidden_layers; ++l) {
    for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
      const PageTable& table = manager_.table(request, l, h);
      std::int64_t n = 0;
      for (std::int64_t i = 0; i < table.count(kHighTier); ++i) {
        const PageId id = table.at(kHighTier, i);
        for (std::int64_t s = 0; s < pool.tokens_per_page(kHighTier); ++s) {
          if (!pool.live(id, s)) continue;
          // Uniform policies keep a head's tokens packed in position order; swap_in relies on it.
          if (pool.payload(id, s).position != n) {
            throw std::logic_error(fmt::format("paged KV cache: request {} layer {} head {}: slot {} of page {} holds "
                                               "position {}, expected {}", request, l, h, s, i,
                                               pool.payload(id, s).position, n));
          }
          out.slots.push_back(pool.load_codes(id, s));
          ++n;
        }
      }
      if (n != out.tokens || table.count(kLowTier) != 0) {
        throw std::logic_error(fmt::format("paged KV cache: request {} layer {} head {}: {} tokens, expected {}",
                                           request, l, h, n, out.tokens));
      }
    }
  }
  manager_.preempt(request);
  fp8_scales_.erase(request);
  return out;
}

void PagedKvCache::swap_in(std::int64_t request, const Swapped& swapped) {
  reserve_prompt(request, swapped.tokens);
  const std::int64_t tpp = manager_.pool().tokens_per_page(kHighTier);
  std::size_t i = 0;
  PagePool& pool = manager_.pool();
  for (std::int32_t l = 0; l < model_.num_hidden_layers; ++l) {
    for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
      for (std::int64_t t = 0; t < swapped.tokens; ++t) {
        const PagePool::SlotCodes& codes = swapped.slots[i++];
        pool.store_codes(manager_.page_of(request, l, h, SlotRef{kHighTier, t / tpp, t % tpp}), t % tpp, codes);
        // FP8: a slot's metadata is its head's scale, which later tokens are encoded with.
        for (int part = 0; part < 2 && t == 0; ++part) {
          const KvFormat& f = part == 0 ? tiers_[kHighTier].key : tiers_[kHighTier].value;
          if (f.dtype == KvDType::kFp8E4M3) {
            std::memcpy(fp8_scale(request, l, h, part), (part == 0 ? codes.key_meta : codes.value_meta).data(),
                        sizeof(float));
          }
        }
      }
    }
  }
}

}  // namespace kvcheck
