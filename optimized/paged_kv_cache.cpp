#include "optimized/paged_kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fmt/format.h>

#include "kernels/cpu/page_encode.h"
#include "kernels/cpu/quantize.h"
#include "kernels/quant_math.h"
#include "optimized/nvtx_range.h"
#include "optimized/pool_exhausted.h"
#include "optimized/request_error.h"
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

// fp16 round trip of a finite float (non-finite values pass through, for check_finite to name).
float round_to_f16(float x) { return std::isfinite(x) ? quant::f16_to_float(quant::f16_from_float(x)) : x; }

// The floats a slot's stored row holds (one row of kernels/cpu/page_encode.h's block): what the
// decode kernel reads, and what a demoted or flushed token is re-encoded from.
std::vector<float> slot_values(const KvFormat& format, std::int64_t head_dim, const std::vector<std::uint8_t>& codes,
                               const std::vector<std::uint8_t>& meta) {
  if (format.dtype == KvDType::kInt && format.spec.granularity == Granularity::kPerChannel) {
    throw std::logic_error("paged KV cache: a per-channel key row is not readable on its own");
  }
  EncodedBlock b;
  b.rows = 1;
  b.row_bytes = static_cast<std::int64_t>(codes.size());
  b.slot_meta_bytes = static_cast<std::int64_t>(meta.size());
  b.codes = codes;
  b.slot_meta = meta;
  if (format.dtype == KvDType::kFp8E4M3) std::memcpy(&b.fp8_scale, meta.data(), sizeof(float));
  return decode_block(format, b, head_dim);
}

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
  if (policy.fp8_scale() == Fp8Scale::kPage &&
      (!uses_low_tier_ || policy.residual_tokens() != manager_.pool().tokens_per_page(kLowTier))) {
    throw std::logic_error(fmt::format("paged KV cache: policy {} scales FP8 per page, but its residual is not one "
                                       "page of its low tier ({} tokens): make_engine binds it", policy.name(),
                                       manager_.pool().tokens_per_page(kLowTier)));
  }
}

std::int64_t request_pages(const ModelConfig& model, std::span<const KvTier> tiers, std::int64_t page_bytes,
                           std::int64_t tokens) {
  // A tier gets a new page only when its pages are full, so it never holds more than
  // ceil(peak live tokens / tokens per page) pages, and a head never holds more than `tokens`.
  std::int64_t per_head = 0;
  for (const KvTier& tier : tiers) per_head += pages_for(tokens, tokens_per_page(tier, model.head_dim, page_bytes));
  return per_head * model.num_hidden_layers * model.num_key_value_heads;
}

std::int64_t PagedKvCache::request_pages(std::int64_t tokens) const {
  return kvcheck::request_pages(model_, std::span(tiers_).first(uses_low_tier_ ? 2 : 1), manager_.pool().page_bytes(),
                                tokens);
}

std::int64_t PagedKvCache::prompt_pages(std::int64_t tokens) const {
  // The prompt phase allocates every token at high, then keeps ceil(high / a) + ceil(low / b)
  // pages: at most one page per head more than that first round (b >= a).
  const std::int64_t tpp = manager_.pool().tokens_per_page(kHighTier);
  return ((tokens + tpp - 1) / tpp + (uses_low_tier_ ? 1 : 0)) * model_.num_hidden_layers * model_.num_key_value_heads;
}

void PagedKvCache::check_finite(std::int64_t request, std::int32_t layer, std::int32_t head,
                                std::span<const std::int32_t> positions, std::span<const float> keys,
                                std::span<const float> values) const {
  const std::int64_t d = model_.head_dim;
  for (int part = 0; part < 2; ++part) {
    const std::span<const float> rows = part == 0 ? keys : values;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (!std::isfinite(rows[i])) {
        throw RequestInputError(request, fmt::format("request {}: layer {}, kv head {}, position {}: {} channel {} is {} (not stored)",
                                     request, layer, head, positions[i / static_cast<std::size_t>(d)],
                                     part == 0 ? "key" : "value", i % static_cast<std::size_t>(d), rows[i]));
      }
    }
  }
}

void PagedKvCache::check_fp16_range(std::int64_t request, std::int32_t layer, std::int32_t head,
                                    std::span<const std::int32_t> positions, std::span<const float> rows,
                                    const char* part) const {
  const auto d = static_cast<std::size_t>(model_.head_dim);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (std::fabs(rows[i]) > quant::kF16Max) {
      throw RequestInputError(request, fmt::format("request {}: layer {}, kv head {}, position {}: {} channel {} = {} is outside "
                                   "fp16's range (not stored)", request, layer, head, positions[i / d], part, i % d,
                                   rows[i]));
    }
  }
}

float* PagedKvCache::fp8_scale(std::int64_t request, std::int32_t layer, std::int32_t head, int part) {
  std::vector<float>& s = fp8_scales_[request];
  s.resize(static_cast<std::size_t>(2 * manager_.heads_per_request()), 0.0f);
  return &s[static_cast<std::size_t>(2 * (layer * model_.num_key_value_heads + head) + part)];
}

void PagedKvCache::store_block(std::int64_t request, std::int32_t layer, std::int32_t head, int tier_index,
                               std::span<const SlotRef> slots, std::span<const std::int32_t> positions,
                               std::span<const float> keys, std::span<const float> values) {
  const std::int64_t d = model_.head_dim;
  const auto n = static_cast<std::int64_t>(slots.size());
  if (n == 0) return;
  check_finite(request, layer, head, positions, keys, values);
  const KvTier& tier = tiers_[static_cast<std::size_t>(tier_index)];
  // fp16 holds magnitudes up to 65504; rounding a larger one would store an infinity.
  for (int part = 0; part < 2; ++part) {
    if ((part == 0 ? tier.key : tier.value).dtype != KvDType::kFp16) continue;
    check_fp16_range(request, layer, head, positions, part == 0 ? keys : values, part == 0 ? "key" : "value");
  }
  PagePool& pool = manager_.pool();
  std::vector<PageId> pages(slots.size());
  for (std::size_t i = 0; i < slots.size(); ++i) pages[i] = manager_.page_of(request, layer, head, slots[i]);
  EncodedBlock blocks[2];
  for (int part = 0; part < 2; ++part) {
    const KvFormat& format = part == 0 ? tier.key : tier.value;
    const std::int64_t G = format.spec.token_group();
    if (format.dtype == KvDType::kInt && G > 1) {
      // A per-channel group is G consecutive slots of one page from a multiple of G.
      for (std::int64_t i = 0; i < n; ++i) {
        const SlotRef& at = slots[static_cast<std::size_t>(i)];
        const SlotRef& first = slots[static_cast<std::size_t>(i - i % G)];
        if (n % G != 0 || first.slot % G != 0 || pages[static_cast<std::size_t>(i)] != pages[static_cast<std::size_t>(i - i % G)] ||
            at.slot != first.slot + i % G) {
          throw std::logic_error(fmt::format("paged KV cache: request {} layer {} head {}: {} tokens from position {} "
                                             "do not fill whole groups of {} slots", request, layer, head, n,
                                             positions[0], G));
        }
      }
    }
    const std::span<const float> x = part == 0 ? keys : values;
    const KvLocation at{layer, head, positions[0], part == 0 ? "key" : "value"};
    if (format.dtype != KvDType::kFp8E4M3) {
      blocks[part] = encode_block(format, x, n, d, at);
      continue;
    }
    fp8_stored_ += static_cast<std::int64_t>(x.size());
    switch (policy_.fp8_scale()) {
      case Fp8Scale::kPrompt: {
        float* head_scale = fp8_scale(request, layer, head, part);
        const float scale = *head_scale;  // 0 at the head's first block: its amax sets it
        blocks[part] = encode_block(format, x, n, d, at, scale);
        if (scale > 0.0f) count_fp8_saturated(x, scale);
        *head_scale = blocks[part].fp8_scale;
        break;
      }
      case Fp8Scale::kCalibrated: {
        const float scale = policy_.fp8_fixed_scale(layer, head, part);
        blocks[part] = encode_block(format, x, n, d, at, scale);
        count_fp8_saturated(x, scale);
        break;
      }
      case Fp8Scale::kPage:
        blocks[part] = encode_fp8_pages(format, x, slots, pages, positions, at);
        break;
    }
  }
  const EncodedBlock& k = blocks[0];
  const EncodedBlock& v = blocks[1];
  for (std::int64_t i = 0; i < n; ++i) {
    const auto row = [](std::span<const std::uint8_t> x) { return std::vector<std::uint8_t>(x.begin(), x.end()); };
    pool.store_codes(pages[static_cast<std::size_t>(i)], slots[static_cast<std::size_t>(i)].slot,
                     PagePool::SlotCodes{row(k.row(i)), row(k.meta(i)), row(v.row(i)), row(v.meta(i))});
    if (k.group_meta_bytes > 0 && i % k.group_tokens == 0) {
      pool.store_key_group_meta(pages[static_cast<std::size_t>(i)], slots[static_cast<std::size_t>(i)].slot,
                                k.group(i / k.group_tokens));
    }
  }
}

void PagedKvCache::count_fp8_saturated(std::span<const float> x, float scale) {
  for (const float v : x) {
    if (quant::abs_f(quant::div_rn(v, scale)) > quant::kE4M3Max) ++fp8_saturated_;
  }
}

EncodedBlock PagedKvCache::encode_fp8_pages(const KvFormat& format, std::span<const float> x,
                                            std::span<const SlotRef> slots, std::span<const PageId> pages,
                                            std::span<const std::int32_t> positions, const KvLocation& at) const {
  const std::int64_t d = model_.head_dim;
  const auto n = static_cast<std::int64_t>(slots.size());
  const std::int64_t tpp = manager_.pool().tokens_per_page(kLowTier);
  EncodedBlock out;
  out.rows = n;
  for (std::int64_t first = 0; first < n; first += tpp) {
    // A page is encoded whole, once: tpp tokens in its slots 0 .. tpp - 1.
    for (std::int64_t i = first; i < first + tpp; ++i) {
      if (slots[0].tier != kLowTier || i >= n || pages[static_cast<std::size_t>(i)] != pages[static_cast<std::size_t>(first)] ||
          slots[static_cast<std::size_t>(i)].slot != i - first) {
        throw std::logic_error(fmt::format("paged KV cache: layer {} head {}: {} tokens from position {} do not fill "
                                           "whole FP8 pages of {} slots (fp8:scale=page encodes a page once, whole)",
                                           at.layer, at.head, n, positions[0], tpp));
      }
    }
    KvLocation page_at = at;
    page_at.first_token = positions[static_cast<std::size_t>(first)];
    const EncodedBlock b = encode_block(format, x.subspan(static_cast<std::size_t>(first * d), static_cast<std::size_t>(tpp * d)),
                                        tpp, d, page_at);
    out.row_bytes = b.row_bytes;
    out.slot_meta_bytes = b.slot_meta_bytes;
    out.codes.insert(out.codes.end(), b.codes.begin(), b.codes.end());
    out.slot_meta.insert(out.slot_meta.end(), b.slot_meta.begin(), b.slot_meta.end());
  }
  return out;
}

void PagedKvCache::store(std::int64_t request, std::int32_t layer, std::int32_t head, const SlotRef& slot,
                         std::int32_t position, std::span<const float> key, std::span<const float> value) {
  store_block(request, layer, head, slot.tier, {&slot, 1}, {&position, 1}, key, value);
}

void PagedKvCache::reserve_prompt(std::int64_t request, std::int64_t tokens) {
  manager_.admit(request);
  try {
    PromptRequest prompt{request, tokens, {}};
    prompt.heads.assign(static_cast<std::size_t>(manager_.heads_per_request()), PromptHeadPlan{tokens, 0, {}, {}});
    const NvtxRange range("compaction");
    manager_.prompt_phase({&prompt, 1});
  } catch (...) {
    manager_.finish(request);  // a prompt that does not fit leaves nothing behind
    throw;
  }
}

void PagedKvCache::write_prompt_layer(std::int64_t request, std::int32_t layer, std::int64_t tokens,
                                      std::span<const float> keys, std::span<const float> values) {
  write_prompt_rows(request, layer, 0, tokens, keys, values);
}

void PagedKvCache::write_prompt_rows(std::int64_t request, std::int32_t layer, std::int64_t first, std::int64_t tokens,
                                     std::span<const float> keys, std::span<const float> values) {
  const std::int64_t kv_dim = model_.kv_dim();
  const std::int64_t d = model_.head_dim;
  if (static_cast<std::int64_t>(keys.size()) != tokens * kv_dim ||
      static_cast<std::int64_t>(values.size()) != tokens * kv_dim) {
    throw std::invalid_argument("paged KV cache: write_prompt_rows keys/values have the wrong size");
  }
  // The prompt phase (or extend) wrote token t of the tier at page t / tpp, slot t % tpp. Each
  // head's rows are encoded as one block (FP8: the prompt's amax sets the head's scale).
  const std::int64_t tpp = manager_.pool().tokens_per_page(kHighTier);
  std::vector<SlotRef> slots(static_cast<std::size_t>(tokens));
  std::vector<std::int32_t> positions(slots.size());
  for (std::int64_t i = 0; i < tokens; ++i) {
    const std::int64_t t = first + i;
    slots[static_cast<std::size_t>(i)] = SlotRef{kHighTier, t / tpp, t % tpp};
    positions[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(t);
  }
  std::vector<float> k(static_cast<std::size_t>(tokens * d)), v(k.size());
  for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
    for (std::int64_t t = 0; t < tokens; ++t) {
      const auto at = static_cast<std::ptrdiff_t>(t * kv_dim + h * d);
      std::copy_n(keys.begin() + at, d, k.begin() + t * d);
      std::copy_n(values.begin() + at, d, v.begin() + t * d);
    }
    store_block(request, layer, h, kHighTier, slots, positions, k, v);
  }
}

void PagedKvCache::read_prompt_rows(std::int64_t request, std::int32_t layer, std::int64_t tokens, std::span<float> keys,
                                    std::span<float> values) const {
  const std::int64_t kv_dim = model_.kv_dim();
  const std::int64_t d = model_.head_dim;
  if (static_cast<std::int64_t>(keys.size()) != tokens * kv_dim ||
      static_cast<std::int64_t>(values.size()) != tokens * kv_dim) {
    throw std::invalid_argument("paged KV cache: read_prompt_rows keys/values have the wrong size");
  }
  const KvTier& tier = tiers_.front();
  if (uses_low_tier_ || tier.key.spec.token_group() != 1 || tier.value.spec.token_group() != 1) {
    throw std::logic_error(fmt::format("paged KV cache: read_prompt_rows under policy {}: per-token formats in one "
                                       "tier only", policy_.name()));
  }
  const PagePool& pool = manager_.pool();
  const std::int64_t tpp = pool.tokens_per_page(kHighTier);
  // One block per head and part: the slots' code rows and metadata, in position order.
  const auto decode = [&](const KvFormat& format, std::span<const PagePool::SlotCodes> codes, bool key, std::span<float> out,
                          std::int64_t h) {
    EncodedBlock b;
    b.rows = tokens;
    for (const PagePool::SlotCodes& c : codes) {
      const std::vector<std::uint8_t>& row = key ? c.key : c.value;
      const std::vector<std::uint8_t>& meta = key ? c.key_meta : c.value_meta;
      b.row_bytes = static_cast<std::int64_t>(row.size());
      b.codes.insert(b.codes.end(), row.begin(), row.end());
      if (format.dtype == KvDType::kFp8E4M3) {
        // FP8 carries the head's scale in every slot: a prefix-closed FP8 policy's is fixed.
        std::memcpy(&b.fp8_scale, meta.data(), sizeof b.fp8_scale);
      } else {
        b.slot_meta_bytes = static_cast<std::int64_t>(meta.size());
        b.slot_meta.insert(b.slot_meta.end(), meta.begin(), meta.end());
      }
    }
    const std::vector<float> rows = decode_block(format, b, d);
    for (std::int64_t t = 0; t < tokens; ++t) {
      std::copy_n(rows.begin() + t * d, d, out.begin() + t * kv_dim + h * d);
    }
  };
  std::vector<PagePool::SlotCodes> codes(static_cast<std::size_t>(tokens));
  for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
    const PageTable& table = manager_.table(request, layer, h);
    for (std::int64_t t = 0; t < tokens; ++t) {
      codes[static_cast<std::size_t>(t)] = pool.load_codes(table.at(kHighTier, t / tpp), t % tpp);
    }
    decode(tier.key, codes, true, keys, h);
    decode(tier.value, codes, false, values, h);
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
    {
      const NvtxRange range("compaction");
      manager_.prompt_phase({&prompt, 1});
    }
    const NvtxRange range("quantize");
    // The prompt phase placed kept token j of a tier at page j / tpp, slot j % tpp of that tier.
    // A residual policy's low tier is encoded from the fp16 rows, as its flushes are.
    const bool from_fp16 = policy_.residual_tokens() > 0;
    std::vector<SlotRef> slots;
    std::vector<float> k, v;
    for (std::int32_t l = 0; l < model_.num_hidden_layers; ++l) {
      for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
        const PromptSelection& kp = kept[static_cast<std::size_t>(l * model_.num_key_value_heads + h)];
        for (int tier : {kHighTier, kLowTier}) {
          const std::int64_t tpp = manager_.pool().tokens_per_page(tier);
          const std::vector<std::int32_t>& list = tier == kHighTier ? kp.high : kp.low;
          slots.clear();
          k.clear();
          v.clear();
          for (std::size_t j = 0; j < list.size(); ++j) {
            const auto slot = static_cast<std::int64_t>(j);
            slots.push_back(SlotRef{tier, slot / tpp, slot % tpp});
            const auto at = static_cast<std::ptrdiff_t>(list[j] * kv_dim + h * d);
            k.insert(k.end(), keys[static_cast<std::size_t>(l)].begin() + at, keys[static_cast<std::size_t>(l)].begin() + at + d);
            v.insert(v.end(), values[static_cast<std::size_t>(l)].begin() + at,
                     values[static_cast<std::size_t>(l)].begin() + at + d);
          }
          if (from_fp16 && tier == kLowTier) {
            check_finite(request, l, h, list, k, v);
            check_fp16_range(request, l, h, list, k, "key");
            check_fp16_range(request, l, h, list, v, "value");
            for (float* x : {k.data(), v.data()}) {
              for (std::size_t i = 0; i < k.size(); ++i) x[i] = round_to_f16(x[i]);
            }
          }
          store_block(request, l, h, tier, slots, list, k, v);
        }
      }
    }
  } catch (...) {
    manager_.finish(request);  // nothing of a prompt that failed stays behind
    throw;
  }
}

void PagedKvCache::reserve(std::span<const std::int64_t> requests, std::span<const std::int32_t> positions,
                           std::span<const StepDecision> step) {
  const std::int64_t heads = manager_.heads_per_request();
  const std::int64_t d = model_.head_dim;
  if (!step.empty() && static_cast<std::int64_t>(step.size()) != static_cast<std::int64_t>(requests.size()) * heads) {
    throw std::invalid_argument("paged KV cache: reserve needs one step decision per head of every request");
  }
  std::vector<DecodeHead> ops;
  ops.reserve(requests.size() * static_cast<std::size_t>(heads));
  // Tokens that change tier (a demotion, or a flush of the residual) are re-encoded from what
  // their high slots hold, read before the step kills them.
  struct Moved {
    std::size_t op;
    std::vector<std::int32_t> positions;
    std::vector<float> keys, values;  // [positions][head_dim]
  };
  std::vector<Moved> moved;
  const PagePool& pool = manager_.pool();
  const KvTier& high = tiers_[kHighTier];
  auto read_high = [&](PageId id, std::int64_t slot, Moved& m) {
    const PagePool::SlotCodes codes = pool.load_codes(id, slot);
    m.positions.push_back(pool.payload(id, slot).position);
    const std::vector<float> k = slot_values(high.key, d, codes.key, codes.key_meta);
    const std::vector<float> v = slot_values(high.value, d, codes.value, codes.value_meta);
    m.keys.insert(m.keys.end(), k.begin(), k.end());
    m.values.insert(m.values.end(), v.begin(), v.end());
  };
  for (std::size_t i = 0; i < requests.size(); ++i) {
    for (std::int32_t l = 0; l < model_.num_hidden_layers; ++l) {
      for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) {
        DecodeHead op{HeadKey{requests[i], l, h}, TokenPayload{positions[i], 0.0f},
                      step.empty() ? StepDecision{} : step[ops.size()], policy_.slot_strategy()};
        Moved m{ops.size(), {}, {}, {}};
        if (op.decision.demote) {
          const SlotRef s = manager_.live_slot(requests[i], l, h, *op.decision.demote);
          if (s.tier == kHighTier) read_high(manager_.page_of(requests[i], l, h, s), s.slot, m);  // else refused below
        } else if (op.decision.flush) {
          // Every live high token, in walk order (the order the flush places them in).
          walk_pages(manager_, requests[i], l, h, [&](int tier, std::int64_t, PageId id) {
            if (tier != kHighTier) return;
            for (std::int64_t slot = 0; slot < pool.tokens_per_page(kHighTier); ++slot) {
              if (pool.live(id, slot)) read_high(id, slot, m);
            }
          });
        }
        if (!m.positions.empty()) moved.push_back(std::move(m));
        ops.push_back(op);
      }
    }
  }
  {
    const NvtxRange range("compaction");
    manager_.decode_step(ops);
  }
  const NvtxRange range("quantize");  // demoted and flushed tokens re-encoded in their new tier
  std::vector<SlotRef> slots;
  for (const Moved& m : moved) {
    const HeadKey& at = ops[m.op].head;
    slots.clear();
    for (const std::int32_t position : m.positions) {
      const std::optional<SlotRef> slot = manager_.find_slot(at.request, at.layer, at.head, kLowTier, position);
      if (!slot) {
        throw std::logic_error(fmt::format("paged KV cache: {}: position {} moved to the low tier has no low slot",
                                           at.where(), position));
      }
      slots.push_back(*slot);
    }
    store_block(at.request, at.layer, at.head, kLowTier, slots, m.positions, m.keys, m.values);
  }
}

void PagedKvCache::live_tokens(std::int64_t request, std::int32_t layer, std::int32_t head,
                               std::vector<LiveToken>& tokens, std::vector<SlotRef>& slots) const {
  manager_.live_slots(request, layer, head, slots);
  tokens.clear();
  const PageTable& table = manager_.table(request, layer, head);
  for (const SlotRef& s : slots) {
    const TokenPayload p = manager_.pool().payload(table.at(s.tier, s.page_index), s.slot);
    tokens.push_back(LiveToken{p.position, p.score, s.tier});
  }
}

void PagedKvCache::add_scores(std::int64_t request, std::int32_t layer, std::int32_t head,
                              std::span<const float> probs) {
  PagePool& pool = manager_.pool();
  std::size_t j = 0;
  walk_pages(manager_, request, layer, head, [&](int tier, std::int64_t, PageId id) {
    for (std::int64_t s = 0; s < pool.tokens_per_page(tier); ++s, ++j) {
      if (j >= probs.size()) throw std::invalid_argument("paged KV cache: add_scores has fewer probabilities than slots");
      if (pool.live(id, s)) pool.add_score(id, s, probs[j]);
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

void PagedKvCache::head_page_ids(std::int64_t request, std::int32_t layer, std::int32_t head,
                                 std::vector<std::int32_t>& ids_and_tiers) const {
  ids_and_tiers.clear();
  const PagePool& pool = manager_.pool();
  walk_pages(manager_, request, layer, head, [&](int, std::int64_t, PageId id) {
    ids_and_tiers.push_back(static_cast<std::int32_t>(id));
    ids_and_tiers.push_back(static_cast<std::int32_t>(pool.owner(id).tier));
  });
}

SlotRef PagedKvCache::write_slot(std::int64_t request, std::int32_t layer, std::int32_t head,
                                 std::int32_t position) const {
  const std::optional<SlotRef> slot = manager_.find_slot(request, layer, head, kHighTier, position);
  if (!slot) {
    throw std::logic_error(fmt::format("paged KV cache: request {} layer {} head {}: position {} was not reserved",
                                       request, layer, head, position));
  }
  return *slot;
}

void PagedKvCache::write_token_at(std::int64_t request, std::int32_t layer, std::int32_t head, const SlotRef& slot,
                                  std::int32_t position, std::span<const float> key, std::span<const float> value) {
  if (slot != write_slot(request, layer, head, position)) {
    throw std::logic_error(fmt::format("paged KV cache: request {} layer {} head {}: position {} was reserved in "
                                       "another slot than the write target (tier {}, page {}, slot {})",
                                       request, layer, head, position, slot.tier, slot.page_index, slot.slot));
  }
  store(request, layer, head, slot, position, key, value);
}

void PagedKvCache::share_prefix(std::int64_t from, std::int64_t to, std::int64_t tokens) {
  manager_.admit(to);
  try {
    manager_.share_prefix(from, to, tokens);
  } catch (...) {
    manager_.finish(to);
    throw;
  }
  if (const auto it = fp8_scales_.find(from); it != fp8_scales_.end()) fp8_scales_[to] = it->second;
}

void PagedKvCache::reserve_prompt_after_prefix(std::int64_t from, std::int64_t to, std::int64_t shared,
                                              std::int64_t prompt_tokens) {
  share_prefix(from, to, shared);
  try {
    if (prompt_tokens > shared) manager_.extend(to, prompt_tokens - shared);
  } catch (...) {
    release(to);
    throw;
  }
}

void PagedKvCache::release(std::int64_t request) {
  if (manager_.has_request(request)) manager_.finish(request);
  fp8_scales_.erase(request);
}

void PagedKvCache::preempt(std::int64_t request) {
  manager_.preempt(request);
  fp8_scales_.erase(request);
}

std::int64_t PagedKvCache::tokens(std::int64_t request) const {
  return manager_.live_tokens(request, 0, 0, kHighTier) + manager_.live_tokens(request, 0, 0, kLowTier);
}

std::int64_t PagedKvCache::bytes_held(std::int64_t request) const {
  std::int64_t n = 0;
  for (std::int32_t l = 0; l < model_.num_hidden_layers; ++l) {
    for (std::int32_t h = 0; h < model_.num_key_value_heads; ++h) n += manager_.bytes_held(request, l, h);
  }
  return n;
}

}  // namespace kvcheck
