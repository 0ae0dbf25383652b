#include "optimized/paged_kv_cache.h"

#include <cmath>
#include <cstring>
#include <fmt/format.h>

#include "kernels/cpu/quantize.h"
#include "kernels/quant_math.h"
#include "optimized/pool_exhausted.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

PageManagerConfig manager_config(const ModelConfig& model, const std::vector<KvTier>& tiers,
                                 const PagedKvCacheConfig& c) {
  PageManagerConfig m;
  m.pool.pages = c.pages;
  m.pool.page_bytes = c.page_bytes;
  m.pool.head_dim = model.head_dim;
  m.pool.tiers = tiers;
  m.pool.poison = c.poison;
  m.layers = model.num_hidden_layers;
  m.kv_heads = model.num_key_value_heads;
  m.max_seq_len = model.max_position_embeddings;
  return m;
}

// One row in a stored format: code bytes (and, for INT, the fp16 scale and zero as metadata).
void encode_row(const KvFormat& format, std::span<const float> row, const KvLocation& at,
                std::vector<std::uint8_t>& codes, std::vector<std::uint8_t>& meta) {
  switch (format.dtype) {
    case KvDType::kFp32:
      std::memcpy(codes.data(), row.data(), row.size() * sizeof(float));
      return;
    case KvDType::kFp16:
      for (std::size_t i = 0; i < row.size(); ++i) {
        const std::uint16_t h = quant::f16_from_float(row[i]);
        std::memcpy(codes.data() + 2 * i, &h, 2);
      }
      return;
    case KvDType::kInt: {
      std::uint16_t scale = 0;
      std::uint16_t zero = 0;
      quantize(format.spec, row, 1, static_cast<std::int64_t>(row.size()), at, codes, {&scale, 1}, {&zero, 1});
      std::memcpy(meta.data(), &scale, 2);
      std::memcpy(meta.data() + 2, &zero, 2);
      return;
    }
    case KvDType::kFp8E4M3:
      break;
  }
  throw InputError("paged KV cache: " + kv_format_name(format) + " is not a per-token page format");
}

// The floats a stored row holds (the inverse of encode_row up to its rounding).
std::vector<float> decode_row(const KvFormat& format, std::int64_t head_dim, const std::vector<std::uint8_t>& codes,
                              const std::vector<std::uint8_t>& meta) {
  std::vector<float> row(static_cast<std::size_t>(head_dim));
  switch (format.dtype) {
    case KvDType::kFp32:
      std::memcpy(row.data(), codes.data(), row.size() * sizeof(float));
      return row;
    case KvDType::kFp16:
      for (std::size_t i = 0; i < row.size(); ++i) {
        std::uint16_t h = 0;
        std::memcpy(&h, codes.data() + 2 * i, 2);
        row[i] = quant::f16_to_float(h);
      }
      return row;
    case KvDType::kInt: {
      std::uint16_t scale = 0;
      std::uint16_t zero = 0;
      std::memcpy(&scale, meta.data(), 2);
      std::memcpy(&zero, meta.data() + 2, 2);
      dequantize(format.spec, codes, {&scale, 1}, {&zero, 1}, 1, head_dim, row);
      return row;
    }
    case KvDType::kFp8E4M3:
      break;
  }
  throw InputError("paged KV cache: " + kv_format_name(format) + " is not a per-token page format");
}

}  // namespace

namespace {
// Calls visit(tier, page_index, id) for every page of a head in walk order: the high side of
// its table, then the low side (the order the decode kernel reads and its probabilities follow).
template <typename Visit>
void walk_pages(const UnifiedPageManager& manager, std::int64_t request, std::int32_t layer, std::int32_t head,
                Visit&& visit) {
  const PageTable& table = manager.table(request, layer, head);
  for (int tier : {kHighTier, kLowTier}) {
    for (std::int64_t i = 0; i < table.count(tier); ++i) visit(tier, i, table.at(tier, i));
  }
}

// The page manager always has a high and a low tier; a one-tier policy uses its tier for both
// (the low side of every table then stays empty).
std::vector<KvTier> two_tiers(std::vector<KvTier> tiers) {
  if (tiers.size() == 1) tiers.push_back(tiers[0]);
  return tiers;
}
}  // namespace

PagedKvCache::PagedKvCache(const ModelConfig& model, const KvPolicy& policy, PagedKvCacheConfig config)
    : model_(model), policy_(policy), uses_low_tier_(policy.tiers().size() > 1), tiers_(two_tiers(policy.tiers())),
      manager_(manager_config(model, tiers_, config)) {
  for (const KvTier& t : tiers_) tier_reads_.push_back(make_tier_read(t, model.head_dim, config.page_bytes));
}

std::int64_t PagedKvCache::pages_for(std::int64_t tokens) const {
  // A tier gets a new page only when its pages are full, so it never holds more than
  // ceil(peak live tokens / tokens per page) pages, and a head never holds more than `tokens`.
  std::int64_t per_head = 0;
  for (int tier : {kHighTier, kLowTier}) {
    if (tier == kLowTier && !uses_low_tier_) break;
    const std::int64_t tpp = manager_.pool().tokens_per_page(tier);
    per_head += (tokens + tpp - 1) / tpp;
  }
  return per_head * model_.num_hidden_layers * model_.num_key_value_heads;
}

std::int64_t PagedKvCache::prompt_pages(std::int64_t tokens) const {
  // The prompt phase allocates every token at high, then keeps ceil(high / a) + ceil(low / b)
  // pages: at most one page per head more than that first round (b >= a).
  const std::int64_t tpp = manager_.pool().tokens_per_page(kHighTier);
  return ((tokens + tpp - 1) / tpp + (uses_low_tier_ ? 1 : 0)) * model_.num_hidden_layers * model_.num_key_value_heads;
}

void PagedKvCache::encode(std::int64_t request, std::int32_t layer, std::int32_t head, std::int32_t position, int tier_index,
                          std::span<const float> key, std::span<const float> value,
                          PagePool::SlotCodes& codes) const {
  for (int part = 0; part < 2; ++part) {
    const std::span<const float> row = part == 0 ? key : value;
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (!std::isfinite(row[c])) {
        throw InputError(fmt::format("request {}: layer {}, kv head {}, position {}: {} channel {} is {} (not stored)",
                                     request, layer, head, position, part == 0 ? "key" : "value", c, row[c]));
      }
    }
  }
  const KvTier& tier = tiers_[static_cast<std::size_t>(tier_index)];
  const KvLocation at_key{layer, head, position, "key"};
  const KvLocation at_value{layer, head, position, "value"};
  encode_row(tier.key, key, at_key, codes.key, codes.key_meta);
  encode_row(tier.value, value, at_value, codes.value, codes.value_meta);
}

void PagedKvCache::store(std::int64_t request, std::int32_t layer, std::int32_t head, const SlotRef& slot,
                         std::int32_t position, std::span<const float> key, std::span<const float> value) {
  PagePool& pool = manager_.pool();
  PagePool::SlotCodes codes = pool.empty_codes(slot.tier);
  encode(request, layer, head, position, slot.tier, key, value, codes);
  pool.store_codes(manager_.page_of(request, layer, head, slot), slot.slot, codes);
}

void PagedKvCache::reserve_prompt(std::int64_t request, std::int64_t tokens) {
  manager_.admit(request);
  try {
    PromptRequest prompt{request, tokens, {}};
    prompt.heads.assign(static_cast<std::size_t>(manager_.heads_per_request()), PromptHeadPlan{tokens, 0, {}, {}});
    manager_.prompt_phase({&prompt, 1});
  } catch (...) {
    manager_.finish(request);  // a prompt that does not fit leaves nothing behind
    throw;
  }
}

void PagedKvCache::write_prompt_layer(std::int64_t request, std::int32_t layer, std::int64_t tokens,
                                      std::span<const float> keys, std::span<const float> values) {
  const std::int64_t kv_dim = model_.kv_dim();
  const std::int64_t d = model_.head_dim;
  if (static_cast<std::int64_t>(keys.size()) != tokens * kv_dim ||
      static_cast<std::int64_t>(values.size()) != tokens * kv_dim) {
    throw std::invalid_argument("paged KV cache: write_prompt_layer keys/values have the wrong size");
  }
  // The prompt phase wrote token t of the tier at page t / tpp, slot t % tpp.
  const std::int64_t tpp = manager_.pool().tokens_per_page(kHighTier);
  for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
    for (std::int64_t t = 0; t < tokens; ++t) {
      const std::size_t at = static_cast<std::size_t>(t * kv_dim + h * d);
      store(request, layer, h, SlotRef{kHighTier, t / tpp, t % tpp}, static_cast<std::int32_t>(t),
            keys.subspan(at, static_cast<std::size_t>(d)), values.subspan(at, static_cast<std::size_t>(d)));
    }
  }
}

void PagedKvCache::check_prompt_fits(std::int64_t tokens) const {
  const std::int64_t needed = prompt_pages(tokens);
  if (needed > free_pages()) {
    throw PoolExhausted(fmt::format("a prompt of {} tokens", tokens), needed, free_pages());
  }
}

void PagedKvCache::commit_prompt(std::int64_t request, std::int64_t tokens, std::span<const PromptSelection> kept,
                                 std::span<const std::vector<float>> scores, std::span<const std::vector<float>> keys,
                                 std::span<const std::vector<float>> values) {
  const std::int64_t heads = manager_.heads_per_request();
  const std::int64_t kv_dim = model_.kv_dim();
  const std::int64_t d = model_.head_dim;
  if (static_cast<std::int64_t>(kept.size()) != heads || (!scores.empty() && static_cast<std::int64_t>(scores.size()) != heads) ||
      static_cast<std::int64_t>(keys.size()) != model_.num_hidden_layers ||
      static_cast<std::int64_t>(values.size()) != model_.num_hidden_layers) {
    throw std::invalid_argument("paged KV cache: commit_prompt needs one plan per head and K/V per layer");
  }
  // Per head and tier: the kept positions (ascending, disjoint between the tiers) as payloads.
  std::vector<std::vector<TokenPayload>> payloads(static_cast<std::size_t>(2 * heads));
  PromptRequest prompt{request, tokens, {}};
  for (std::int64_t i = 0; i < heads; ++i) {
    const PromptSelection& k = kept[static_cast<std::size_t>(i)];
    if (k.high.empty() && k.low.empty()) {
      throw std::logic_error(fmt::format("paged KV cache: request {}: the policy kept no prompt token of head {}",
                                         request, i));
    }
    std::vector<bool> taken(static_cast<std::size_t>(tokens), false);
    for (int tier : {kHighTier, kLowTier}) {
      const std::vector<std::int32_t>& list = tier == kHighTier ? k.high : k.low;
      for (std::size_t j = 0; j < list.size(); ++j) {
        if (list[j] < 0 || list[j] >= tokens || (j > 0 && list[j] <= list[j - 1]) ||
            taken[static_cast<std::size_t>(list[j])]) {
          throw std::logic_error(fmt::format("paged KV cache: request {}: head {} keeps position {} (kept positions "
                                             "must be ascending per tier, in [0, {}), in one tier)", request, i,
                                             list[j], tokens));
        }
        taken[static_cast<std::size_t>(list[j])] = true;
        const float score = scores.empty() || scores[static_cast<std::size_t>(i)].empty()
                                ? 0.0f
                                : scores[static_cast<std::size_t>(i)][static_cast<std::size_t>(list[j])];
        payloads[static_cast<std::size_t>(2 * i + tier)].push_back(TokenPayload{list[j], score});
      }
    }
    prompt.heads.push_back(PromptHeadPlan{static_cast<std::int64_t>(k.high.size()),
                                          static_cast<std::int64_t>(k.low.size()),
                                          payloads[static_cast<std::size_t>(2 * i + kHighTier)],
                                          payloads[static_cast<std::size_t>(2 * i + kLowTier)]});
  }
  manager_.admit(request);
  try {
    manager_.prompt_phase({&prompt, 1});
    // The prompt phase placed kept token j of a tier at page j / tpp, slot j % tpp of that tier.
    for (std::int32_t l = 0; l < model_.num_hidden_layers; ++l) {
      for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
        const PromptSelection& k = kept[static_cast<std::size_t>(l * model_.num_key_value_heads + h)];
        for (int tier : {kHighTier, kLowTier}) {
          const std::int64_t tpp = manager_.pool().tokens_per_page(tier);
          const std::vector<std::int32_t>& list = tier == kHighTier ? k.high : k.low;
          for (std::size_t j = 0; j < list.size(); ++j) {
            const std::size_t at = static_cast<std::size_t>(list[j] * kv_dim + h * d);
            const std::int64_t slot = static_cast<std::int64_t>(j);
            store(request, l, h, SlotRef{tier, slot / tpp, slot % tpp}, list[j],
                  std::span<const float>(keys[static_cast<std::size_t>(l)]).subspan(at, static_cast<std::size_t>(d)),
                  std::span<const float>(values[static_cast<std::size_t>(l)]).subspan(at, static_cast<std::size_t>(d)));
          }
        }
      }
    }
  } catch (...) {
    manager_.finish(request);  // nothing of a prompt that failed stays behind
    throw;
  }
}

void PagedKvCache::reserve(std::span<const std::int64_t> requests, std::span<const std::int32_t> positions,
                           std::span<const StepOps> step) {
  const std::int64_t heads = manager_.heads_per_request();
  if (!step.empty() && static_cast<std::int64_t>(step.size()) != static_cast<std::int64_t>(requests.size()) * heads) {
    throw std::invalid_argument("paged KV cache: reserve needs one entry of step ops per head of every request");
  }
  std::vector<DecodeOp> ops;
  ops.reserve(requests.size() * static_cast<std::size_t>(heads));
  // A demoted token is re-quantized from what its high slot holds, read before the step kills it.
  struct Demotion {
    std::size_t op;
    std::int32_t position;
    std::vector<float> key, value;
  };
  std::vector<Demotion> demotions;
  const PagePool& pool = manager_.pool();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    for (std::int32_t l = 0; l < model_.num_hidden_layers; ++l) {
      for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
        DecodeOp op;
        op.request = requests[i];
        op.layer = l;
        op.head = h;
        op.token = TokenPayload{positions[i], 0.0f};
        if (!step.empty()) {
          op.evict = step[ops.size()].evict;
          op.demote = step[ops.size()].demote;
        }
        if (op.demote) {
          const PageId id = manager_.page_of(op.request, l, h, *op.demote);
          const PagePool::SlotCodes codes = pool.load_codes(id, op.demote->slot);
          const KvTier& high = tiers_[kHighTier];
          demotions.push_back({ops.size(), pool.payload(id, op.demote->slot).position,
                               decode_row(high.key, model_.head_dim, codes.key, codes.key_meta),
                               decode_row(high.value, model_.head_dim, codes.value, codes.value_meta)});
        }
        ops.push_back(op);
      }
    }
  }
  manager_.decode_step(ops);
  for (const Demotion& dm : demotions) {
    const DecodeOp& op = ops[dm.op];
    const std::optional<SlotRef> slot = manager_.find_slot(op.request, op.layer, op.head, kLowTier, dm.position);
    if (!slot) {
      throw std::logic_error(fmt::format("paged KV cache: request {} layer {} head {}: demoted position {} has no low "
                                         "slot", op.request, op.layer, op.head, dm.position));
    }
    store(op.request, op.layer, op.head, *slot, dm.position, dm.key, dm.value);
  }
}

void PagedKvCache::live_tokens(std::int64_t request, std::int32_t layer, std::int32_t head,
                               std::vector<LiveToken>& tokens, std::vector<SlotRef>& slots) const {
  tokens.clear();
  slots.clear();
  const PagePool& pool = manager_.pool();
  walk_pages(manager_, request, layer, head, [&](int tier, std::int64_t i, PageId id) {
    for (std::int64_t s = 0; s < pool.tokens_per_page(tier); ++s) {
      if (!pool.live(id, s)) continue;
      const TokenPayload p = pool.payload(id, s);
      tokens.push_back(LiveToken{p.position, p.score, tier});
      slots.push_back(SlotRef{tier, i, s});
    }
  });
}

void PagedKvCache::add_scores(std::int64_t request, std::int32_t layer, std::int32_t head,
                              std::span<const float> probs) {
  PagePool& pool = manager_.pool();
  std::size_t j = 0;
  walk_pages(manager_, request, layer, head, [&](int tier, std::int64_t, PageId id) {
    for (std::int64_t s = 0; s < pool.tokens_per_page(tier); ++s, ++j) {
      if (j >= probs.size()) throw std::invalid_argument("paged KV cache: add_scores has fewer probabilities than slots");
      if (!pool.live(id, s)) continue;
      TokenPayload p = pool.payload(id, s);
      p.score += probs[j];
      pool.put(id, s, p);
    }
  });
  if (j != probs.size()) throw std::invalid_argument("paged KV cache: add_scores has more probabilities than slots");
}

void PagedKvCache::write_token(std::int64_t request, std::int32_t layer, std::int32_t position,
                               std::span<const float> key, std::span<const float> value) {
  const std::int64_t d = model_.head_dim;
  for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
    const std::optional<SlotRef> slot = manager_.find_slot(request, layer, h, kHighTier, position);
    if (!slot) {
      throw std::logic_error(fmt::format("paged KV cache: request {} layer {} head {}: position {} was not reserved",
                                         request, layer, h, position));
    }
    store(request, layer, h, *slot, position, key.subspan(static_cast<std::size_t>(h * d), static_cast<std::size_t>(d)),
          value.subspan(static_cast<std::size_t>(h * d), static_cast<std::size_t>(d)));
  }
}

void PagedKvCache::head_pages(std::int64_t request, std::int32_t layer, std::int32_t head,
                              std::vector<PageRead>& pages) const {
  pages.clear();
  const PagePool& pool = manager_.pool();
  walk_pages(manager_, request, layer, head, [&](int, std::int64_t, PageId id) {
    pages.push_back(PageRead{pool.bytes(id).data(), pool.live_mask(id), pool.owner(id).tier});
  });
}

void PagedKvCache::release(std::int64_t request) {
  if (manager_.has_request(request)) manager_.finish(request);
}

void PagedKvCache::preempt(std::int64_t request) { manager_.preempt(request); }

std::int64_t PagedKvCache::tokens(std::int64_t request) const {
  return manager_.live_tokens(request, 0, 0, kHighTier) + manager_.live_tokens(request, 0, 0, kLowTier);
}

std::int64_t PagedKvCache::Swapped::bytes() const {
  std::int64_t n = 0;
  for (const PagePool::SlotCodes& s : slots) {
    n += static_cast<std::int64_t>(s.key.size() + s.key_meta.size() + s.value.size() + s.value_meta.size());
  }
  return n;
}

PagedKvCache::Swapped PagedKvCache::swap_out(std::int64_t request) {
  if (policy_.evicts()) {
    throw std::logic_error(fmt::format("paged KV cache: swap-out of request {} under policy {}: only uniform "
                                       "policies keep a head's positions packed", request, policy_.name()));
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
        pool.store_codes(manager_.page_of(request, l, h, SlotRef{kHighTier, t / tpp, t % tpp}), t % tpp,
                         swapped.slots[i++]);
      }
    }
  }
}

std::int64_t PagedKvCache::bytes_held(std::int64_t request) const {
  std::int64_t n = 0;
  for (std::int32_t l = 0; l < model_.num_hidden_layers; ++l) {
    for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) n += manager_.bytes_held(request, l, h);
  }
  return n;
}

}  // namespace kvcheck
