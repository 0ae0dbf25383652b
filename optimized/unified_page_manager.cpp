// LeanKV's page manager: every change of pages goes through a compaction round.
#include "optimized/unified_page_manager.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "optimized/pool_exhausted.h"
#include "reference/errors.h"

namespace kvcheck {

UnifiedPageManager::UnifiedPageManager(PageManagerConfig config)
    : config_(std::move(config)), pool_(config_.pool), list_(config_.pool.pages) {
  if (pool_.tiers() != 2) throw input_error("page manager", "tiers", "needs 2 tiers (high, low), got {}", pool_.tiers());
  if (config_.layers <= 0 || config_.layers > INT32_MAX) {
    throw input_error("page manager", "layers", "must be in [1, {}], got {}", INT32_MAX, config_.layers);
  }
  if (config_.kv_heads <= 0 || config_.kv_heads > INT32_MAX) {
    throw input_error("page manager", "kv_heads", "must be in [1, {}], got {}", INT32_MAX, config_.kv_heads);
  }
  table_length_ = PageTable::length_for(config_.max_seq_len, pool_.tokens_per_page(kHighTier));
}

// ---- lookups --------------------------------------------------------------------------------

UnifiedPageManager::RequestState& UnifiedPageManager::request_state(std::int64_t request, const char* operation) {
  auto it = requests_.find(request);
  if (it == requests_.end()) throw input_error(fmt::format("request {}", request), operation, "no such request");
  return it->second;
}
const UnifiedPageManager::RequestState& UnifiedPageManager::request_state(std::int64_t request,
                                                                          const char* operation) const {
  auto it = requests_.find(request);
  if (it == requests_.end()) throw input_error(fmt::format("request {}", request), operation, "no such request");
  return it->second;
}

UnifiedPageManager::HeadState& UnifiedPageManager::head_state(std::int64_t request, std::int32_t layer,
                                                              std::int32_t head, const char* operation) {
  RequestState& r = request_state(request, operation);
  if (layer < 0 || layer >= config_.layers || head < 0 || head >= config_.kv_heads) {
    throw input_error(HeadKey{request, layer, head}.where(), operation, "no such layer / kv-head ({} x {})",
                      config_.layers, config_.kv_heads);
  }
  return r.heads[static_cast<std::size_t>(layer * config_.kv_heads + head)];
}
const UnifiedPageManager::HeadState& UnifiedPageManager::head_state(std::int64_t request, std::int32_t layer,
                                                                    std::int32_t head, const char* operation) const {
  return const_cast<UnifiedPageManager*>(this)->head_state(request, layer, head, operation);
}

bool UnifiedPageManager::prompted(std::int64_t request) const { return request_state(request, "prompted").prompted; }

std::vector<std::int64_t> UnifiedPageManager::requests() const {
  std::vector<std::int64_t> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  return ids;
}

const PageTable& UnifiedPageManager::table(std::int64_t request, std::int32_t layer, std::int32_t head) const {
  return head_state(request, layer, head, "table").table;
}

std::int64_t UnifiedPageManager::live_tokens(std::int64_t request, std::int32_t layer, std::int32_t head,
                                             int tier) const {
  return head_state(request, layer, head, "live_tokens").live[tier];
}

std::int64_t UnifiedPageManager::bytes_held(std::int64_t request, std::int32_t layer, std::int32_t head) const {
  return head_state(request, layer, head, "bytes_held").table.used() * pool_.page_bytes();
}

PageId UnifiedPageManager::page_of(std::int64_t request, std::int32_t layer, std::int32_t head,
                                   const SlotRef& slot) const {
  return head_state(request, layer, head, "page_of").table.at(slot.tier, slot.page_index);
}

std::optional<SlotRef> UnifiedPageManager::find_slot(std::int64_t request, std::int32_t layer, std::int32_t head,
                                                     int tier, std::int32_t position) const {
  const HeadState& h = head_state(request, layer, head, "find_slot");
  for (std::int64_t i = 0; i < h.table.count(tier); ++i) {
    const PageId id = h.table.at(tier, i);
    for (std::int64_t s = 0; s < pool_.tokens_per_page(tier); ++s) {
      if (pool_.live(id, s) && pool_.payload(id, s).position == position) return SlotRef{tier, i, s};
    }
  }
  return std::nullopt;
}

std::optional<SlotRef> UnifiedPageManager::free_slot(const HeadState& h, int tier) const {
  for (std::int64_t i = 0; i < h.table.count(tier); ++i) {
    const std::int64_t s = pool_.first_dead_slot(h.table.at(tier, i));
    if (s >= 0) return SlotRef{tier, i, s};
  }
  return std::nullopt;
}

void UnifiedPageManager::validate_slot(const HeadState& h, const SlotRef& s, const char* what) const {
  const std::string where = h.table.key().where();
  if (s.tier != kHighTier && s.tier != kLowTier) throw input_error(where, what, "tier {} is not 0 or 1", s.tier);
  if (s.page_index < 0 || s.page_index >= h.table.count(s.tier)) {
    throw input_error(where, what, "page {} of tier {}: the tier has {} page(s)", s.page_index, s.tier,
                      h.table.count(s.tier));
  }
  if (s.slot < 0 || s.slot >= pool_.tokens_per_page(s.tier) || !pool_.live(h.table.at(s.tier, s.page_index), s.slot)) {
    throw input_error(where, what, "slot {} of page {} of tier {} is not a live slot", s.slot, s.page_index, s.tier);
  }
}

void UnifiedPageManager::record(const CompactionRoundStats& s) {
  last_round_ = s;
  ids_copied_ += s.allocated + s.recycled;
  ++rounds_;
  compaction_seconds_ += s.seconds;
}

// ---- admit and prompt phase -----------------------------------------------------------------

void UnifiedPageManager::admit(std::int64_t request) {
  if (requests_.contains(request)) throw input_error(fmt::format("request {}", request), "admit", "already admitted");
  RequestState r;
  r.heads.reserve(static_cast<std::size_t>(heads_per_request()));
  for (std::int64_t l = 0; l < config_.layers; ++l) {
    for (std::int64_t k = 0; k < config_.kv_heads; ++k) {
      r.heads.push_back(HeadState{
          PageTable(HeadKey{request, static_cast<std::int32_t>(l), static_cast<std::int32_t>(k)}, table_length_), {0, 0}});
    }
  }
  requests_.emplace(request, std::move(r));
}

void UnifiedPageManager::prompt_phase(std::span<const PromptRequest> batch) {
  const std::int64_t a = pool_.tokens_per_page(kHighTier);
  const std::int64_t b = pool_.tokens_per_page(kLowTier);
  // Validation, before anything changes.
  std::vector<HeadState*> heads;
  std::vector<const PromptHeadPlan*> plans;
  std::vector<std::int64_t> conservative;
  std::set<std::int64_t> seen;
  std::int64_t need = 0;
  for (const PromptRequest& p : batch) {
    const std::string where = fmt::format("request {}", p.request);
    RequestState& r = request_state(p.request, "prompt phase");
    if (r.prompted || !seen.insert(p.request).second) throw input_error(where, "prompt phase", "already prompted");
    if (p.prompt_len <= 0 || p.prompt_len > config_.max_seq_len) {
      throw input_error(where, "prompt_len", "must be in [1, max_seq_len = {}], got {}", config_.max_seq_len, p.prompt_len);
    }
    if (static_cast<std::int64_t>(p.heads.size()) != heads_per_request()) {
      throw input_error(where, "prompt phase", "{} head plans for {} heads", p.heads.size(), heads_per_request());
    }
    for (std::size_t k = 0; k < p.heads.size(); ++k) {
      const PromptHeadPlan& plan = p.heads[k];
      HeadState& h = r.heads[k];
      if (plan.high < 0 || plan.low < 0 || plan.high + plan.low > p.prompt_len) {
        throw input_error(h.table.key().where(), "prompt plan", "{} high + {} low tokens of a {}-token prompt", plan.high,
                          plan.low, p.prompt_len);
      }
      if ((!plan.high_payload.empty() && static_cast<std::int64_t>(plan.high_payload.size()) != plan.high) ||
          (!plan.low_payload.empty() && static_cast<std::int64_t>(plan.low_payload.size()) != plan.low)) {
        throw input_error(h.table.key().where(), "prompt plan", "payload sizes differ from the token counts");
      }
      const std::int64_t pages = pages_for(p.prompt_len, a);
      const std::int64_t kept = pages_for(plan.high, a) + pages_for(plan.low, b);
      h.table.require_room(std::max(pages, kept));
      need += pages + std::max<std::int64_t>(0, kept - pages);
      heads.push_back(&h);
      plans.push_back(&plan);
      conservative.push_back(pages);
    }
  }
  if (need > list_.free_count()) throw PoolExhausted("prompt phase", need, list_.free_count());

  const auto n = static_cast<std::int64_t>(heads.size());
  const std::vector<std::int64_t> none(static_cast<std::size_t>(n), 0);
  // Round 1: every prompt token at high precision.
  record(kvcheck::compaction_round(list_, conservative, none, config_.compaction, [&](std::int64_t k, std::int64_t at, std::int64_t) {
    HeadState& h = *heads[static_cast<std::size_t>(k)];
    for (std::int64_t i = 0; i < conservative[static_cast<std::size_t>(k)]; ++i) {
      const PageId id = list_.id_at(at + i);
      pool_.format(id, PageOwner{h.table.key(), kHighTier});
      h.table.push(kHighTier, id);
    }
  }));
  // Round 2: planning per head, then keep / convert / top up / recycle.
  std::vector<std::int64_t> allocate(static_cast<std::size_t>(n)), recycle(static_cast<std::size_t>(n));
  for_each_head(n, config_.compaction, [&](std::int64_t k) {
    const auto i = static_cast<std::size_t>(k);
    const TierDemand demand[2] = {{plans[i]->high, conservative[i], a}, {plans[i]->low, 0, b}};
    const HeadPlan hp = plan_head(demand, /*convertible=*/true);
    allocate[i] = hp.allocate;
    recycle[i] = hp.recycle;
  });
  record(kvcheck::compaction_round(list_, allocate, recycle, config_.compaction, [&](std::int64_t k, std::int64_t at, std::int64_t to) {
    const auto i = static_cast<std::size_t>(k);
    HeadState& h = *heads[i];
    const PromptHeadPlan& plan = *plans[i];
    std::vector<PageId> held;
    for (std::int64_t j = 0; j < h.table.count(kHighTier); ++j) held.push_back(h.table.at(kHighTier, j));
    h.table.clear();
    const auto high = static_cast<std::size_t>(pages_for(plan.high, a));
    const auto low = static_cast<std::size_t>(pages_for(plan.low, b));
    for (std::size_t j = 0; j < high; ++j) h.table.push(kHighTier, held[j]);
    for (std::size_t j = high; j < high + low; ++j) {
      const PageId id = j < held.size() ? held[j] : list_.id_at(at + static_cast<std::int64_t>(j - held.size()));
      pool_.format(id, PageOwner{h.table.key(), kLowTier});
      h.table.push(kLowTier, id);
    }
    for (std::size_t j = high + low; j < held.size(); ++j) {
      list_.put_at(to + static_cast<std::int64_t>(j - high - low), held[j]);
      pool_.release(held[j]);
    }
  }));
  // Tokens, packed per tier.
  for_each_head(n, config_.compaction, [&](std::int64_t k) {
    const auto i = static_cast<std::size_t>(k);
    HeadState& h = *heads[i];
    const PromptHeadPlan& plan = *plans[i];
    for (int tier : {kHighTier, kLowTier}) {
      const std::int64_t count = tier == kHighTier ? plan.high : plan.low;
      const std::span<const TokenPayload> payload = tier == kHighTier ? plan.high_payload : plan.low_payload;
      const std::int64_t tpp = tier == kHighTier ? a : b;
      for (std::int64_t t = 0; t < count; ++t) {
        const TokenPayload p = payload.empty() ? TokenPayload{static_cast<std::int32_t>(t), 0.0f}
                                               : payload[static_cast<std::size_t>(t)];
        pool_.put(h.table.at(tier, t / tpp), t % tpp, p);
      }
      h.live[tier] = count;
    }
  });
  for (const PromptRequest& p : batch) requests_.at(p.request).prompted = true;
}

// ---- generation -----------------------------------------------------------------------------

void UnifiedPageManager::decode_step(std::span<const DecodeOp> ops) {
  const std::int64_t tpp[2] = {pool_.tokens_per_page(kHighTier), pool_.tokens_per_page(kLowTier)};
  // Validation, before anything changes.
  std::vector<HeadState*> heads;
  heads.reserve(ops.size());
  std::set<HeadState*> seen;
  for (const DecodeOp& op : ops) {
    HeadState& h = head_state(op.request, op.layer, op.head, "decode step");
    const std::string where = h.table.key().where();
    if (!requests_.at(op.request).prompted) throw input_error(where, "decode step", "the prompt phase has not run");
    if (!seen.insert(&h).second) throw input_error(where, "decode step", "two ops for one head in one step");
    if (op.flush && (op.evict || op.demote)) {
      throw input_error(where, "flush", "moves every high token to low; it takes no victim or demotion");
    }
    if (op.evict) validate_slot(h, *op.evict, "evict");
    if (op.demote && op.slots != SlotStrategy::kSlotReuse) {
      throw input_error(where, "demote", "takes a freed slot; the {} strategy reuses none", slot_strategy_name(op.slots));
    }
    if (op.demote) {
      validate_slot(h, *op.demote, "demote");
      if (op.demote->tier != kHighTier) throw input_error(where, "demote", "only a high token can be demoted");
      if (op.evict && *op.evict == *op.demote) throw input_error(where, "demote", "the slot is also the victim");
    }
    heads.push_back(&h);
  }
  // Planning: which tier needs a page (at most one per head), or for a flush, the low pages
  // that take every high token and the high pages freed (all but the first, which the new token
  // uses).
  const auto n = static_cast<std::int64_t>(ops.size());
  std::vector<int> page_tier(ops.size(), -1);
  std::vector<std::int64_t> allocate(ops.size(), 0), recycle(ops.size(), 0);
  std::vector<bool> flushing(ops.size(), false);
  // Appending strategies: the page and slot the new token goes to (kNoPage: a new high page),
  // and free-block's emptied victim page.
  std::vector<PageId> append_page(ops.size(), kNoPage), emptied(ops.size(), kNoPage);
  std::vector<std::int64_t> append_slot(ops.size(), 0);
  std::vector<bool> appending(ops.size(), false);
  for_each_head(n, config_.compaction, [&](std::int64_t k) {
    const auto i = static_cast<std::size_t>(k);
    const DecodeOp& op = ops[i];
    const HeadState& h = *heads[i];
    if (op.slots != SlotStrategy::kSlotReuse && !op.flush) {
      appending[i] = true;
      const std::int64_t pages = h.table.count(kHighTier);
      if (pages > 0) {
        const PageId last = h.table.at(kHighTier, pages - 1);
        const std::int64_t next = pool_.last_live_slot(last) + 1;  // before the eviction
        if (next < tpp[kHighTier]) {
          append_page[i] = last;
          append_slot[i] = next;
        }
      }
      if (append_page[i] == kNoPage) {
        page_tier[i] = kHighTier;
        allocate[i] = 1;
      }
      if (op.slots == SlotStrategy::kFreeBlock && op.evict) {
        const PageId victim = h.table.at(op.evict->tier, op.evict->page_index);
        if (pool_.live_count(victim) == 1 && victim != append_page[i]) {
          emptied[i] = victim;
          recycle[i] = 1;
        }
      }
      return;
    }
    if (op.flush && h.live[kHighTier] > 0) {
      flushing[i] = true;
      allocate[i] = std::max<std::int64_t>(
          0, pages_for(h.live[kLowTier] + h.live[kHighTier], tpp[kLowTier]) - h.table.count(kLowTier));
      recycle[i] = h.table.count(kHighTier) - 1;
      return;
    }
    std::int64_t live[2] = {h.live[0], h.live[1]};
    if (op.evict) live[op.evict->tier] -= 1;
    if (op.demote) {
      live[kHighTier] -= 1;
      if (live[kLowTier] == h.table.count(kLowTier) * tpp[kLowTier]) page_tier[i] = kLowTier;
    }
    if (live[kHighTier] == h.table.count(kHighTier) * tpp[kHighTier]) page_tier[i] = kHighTier;
    allocate[i] = page_tier[i] >= 0 ? 1 : 0;
  });
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (allocate[i] > 0) heads[i]->table.require_room(allocate[i]);
  }
  record(kvcheck::compaction_round(list_, allocate, recycle, config_.compaction, [&](std::int64_t k, std::int64_t at,
                                                                             std::int64_t to) {
    const auto i = static_cast<std::size_t>(k);
    HeadState& h = *heads[i];
    if (!flushing[i]) {
      if (emptied[i] != kNoPage) {
        // Free-block: the victim was its page's last live token; the page goes back now.
        const SlotRef& v = *ops[i].evict;
        pool_.kill(emptied[i], v.slot);
        h.live[v.tier] -= 1;
        h.table.erase(v.tier, v.page_index);
        list_.put_at(to, emptied[i]);
        pool_.release(emptied[i]);
      }
      if (page_tier[i] < 0) return;
      const PageId id = list_.id_at(at);
      pool_.format(id, PageOwner{h.table.key(), page_tier[i]});
      h.table.push(page_tier[i], id);
      if (appending[i]) {
        append_page[i] = id;
        append_slot[i] = 0;
      }
      return;
    }
    for (std::int64_t j = 0; j < allocate[i]; ++j) {
      const PageId id = list_.id_at(at + j);
      pool_.format(id, PageOwner{h.table.key(), kLowTier});
      h.table.push(kLowTier, id);
    }
    // Every live high token, in walk order, into the first dead low slots.
    for (std::int64_t p = 0; p < h.table.count(kHighTier); ++p) {
      const PageId from = h.table.at(kHighTier, p);
      for (std::int64_t s = 0; s < tpp[kHighTier]; ++s) {
        if (!pool_.live(from, s)) continue;
        const TokenPayload payload = pool_.backed() ? pool_.payload(from, s) : TokenPayload{};
        pool_.kill(from, s);
        const SlotRef dst = free_slot(h, kLowTier).value();
        pool_.put(h.table.at(kLowTier, dst.page_index), dst.slot, payload);
      }
    }
    h.live[kLowTier] += h.live[kHighTier];
    h.live[kHighTier] = 0;
    std::vector<PageId> surplus;
    while (h.table.count(kHighTier) > 1) surplus.push_back(h.table.pop(kHighTier));
    std::int64_t written = 0;
    for (auto it = surplus.rbegin(); it != surplus.rend(); ++it) {
      list_.put_at(to + written++, *it);
      pool_.release(*it);
    }
  }));
  // The tokens: evict, demote, append.
  for_each_head(n, config_.compaction, [&](std::int64_t k) {
    const auto i = static_cast<std::size_t>(k);
    const DecodeOp& op = ops[i];
    HeadState& h = *heads[i];
    if (op.evict && emptied[i] == kNoPage) {
      pool_.kill(h.table.at(op.evict->tier, op.evict->page_index), op.evict->slot);
      h.live[op.evict->tier] -= 1;
    }
    if (appending[i]) {
      pool_.put(append_page[i], append_slot[i], op.token);
      h.live[kHighTier] += 1;
      return;
    }
    if (op.demote) {
      const PageId from = h.table.at(kHighTier, op.demote->page_index);
      const TokenPayload p = pool_.backed() ? pool_.payload(from, op.demote->slot) : TokenPayload{};
      pool_.kill(from, op.demote->slot);
      h.live[kHighTier] -= 1;
      const SlotRef to = free_slot(h, kLowTier).value();
      pool_.put(h.table.at(kLowTier, to.page_index), to.slot, p);
      h.live[kLowTier] += 1;
    }
    const SlotRef to = free_slot(h, kHighTier).value();
    pool_.put(h.table.at(kHighTier, to.page_index), to.slot, op.token);
    h.live[kHighTier] += 1;
  });
}

// ---- compaction and release -----------------------------------------------------------------

void UnifiedPageManager::compact() {
  const std::int64_t tpp[2] = {pool_.tokens_per_page(kHighTier), pool_.tokens_per_page(kLowTier)};
  std::vector<HeadState*> heads;
  for (auto& [id, r] : requests_) {
    for (HeadState& h : r.heads) heads.push_back(&h);
  }
  const auto n = static_cast<std::int64_t>(heads.size());
  std::vector<std::int64_t> recycle(heads.size(), 0);
  const std::vector<std::int64_t> none(heads.size(), 0);
  for_each_head(n, config_.compaction, [&](std::int64_t k) {
    const HeadState& h = *heads[static_cast<std::size_t>(k)];
    const TierDemand demand[2] = {{h.live[0], h.table.count(kHighTier), tpp[0]},
                                  {h.live[1], h.table.count(kLowTier), tpp[1]}};
    recycle[static_cast<std::size_t>(k)] = plan_head(demand, /*convertible=*/false).recycle;
  });
  record(kvcheck::compaction_round(list_, none, recycle, config_.compaction, [&](std::int64_t k, std::int64_t, std::int64_t to) {
    HeadState& h = *heads[static_cast<std::size_t>(k)];
    std::int64_t written = 0;
    for (int tier : {kHighTier, kLowTier}) {
      const std::int64_t keep = pages_for(h.live[tier], tpp[tier]);
      const std::int64_t count = h.table.count(tier);
      // Move the live slots of the surplus pages into dead slots of the kept ones.
      std::int64_t dst_page = 0;
      for (std::int64_t i = keep; i < count; ++i) {
        const PageId from = h.table.at(tier, i);
        for (std::int64_t s = 0; s < tpp[tier]; ++s) {
          if (!pool_.live(from, s)) continue;
          std::int64_t dst_slot = -1;
          while ((dst_slot = pool_.first_dead_slot(h.table.at(tier, dst_page))) < 0) ++dst_page;
          pool_.move(from, s, h.table.at(tier, dst_page), dst_slot);
        }
      }
      std::vector<PageId> surplus;
      while (h.table.count(tier) > keep) surplus.push_back(h.table.pop(tier));
      for (auto it = surplus.rbegin(); it != surplus.rend(); ++it) {
        list_.put_at(to + written++, *it);
        pool_.release(*it);
      }
    }
  }));
}

void UnifiedPageManager::release(std::int64_t request) {
  RequestState& r = request_state(request, "release");
  const auto n = static_cast<std::int64_t>(r.heads.size());
  std::vector<std::int64_t> recycle(r.heads.size());
  const std::vector<std::int64_t> none(r.heads.size(), 0);
  for (std::size_t k = 0; k < r.heads.size(); ++k) recycle[k] = r.heads[k].table.used();
  (void)n;
  record(kvcheck::compaction_round(list_, none, recycle, config_.compaction, [&](std::int64_t k, std::int64_t, std::int64_t to) {
    HeadState& h = r.heads[static_cast<std::size_t>(k)];
    std::int64_t written = 0;
    for (int tier : {kHighTier, kLowTier}) {
      for (std::int64_t i = 0; i < h.table.count(tier); ++i) {
        const PageId id = h.table.at(tier, i);
        list_.put_at(to + written++, id);
        pool_.release(id);
      }
    }
    h.table.clear();
    h.live[0] = h.live[1] = 0;
  }));
  requests_.erase(request);
}

void UnifiedPageManager::finish(std::int64_t request) { release(request); }

void UnifiedPageManager::preempt(std::int64_t request) {
  release(request);
  ++preemptions_;
}

PageManagerStats UnifiedPageManager::stats() const {
  PageManagerStats s;
  s.pool_pages = list_.pool_size();
  s.free_pages = list_.free_count();
  s.tiers.resize(2);
  for (const auto& [id, r] : requests_) {
    std::int64_t pages = 0;
    for (const HeadState& h : r.heads) {
      for (int tier : {kHighTier, kLowTier}) {
        TierStats& t = s.tiers[static_cast<std::size_t>(tier)];
        t.pages += h.table.count(tier);
        t.live_slots += h.live[tier];
        t.allocated_slots += h.table.count(tier) * pool_.tokens_per_page(tier);
      }
      pages += h.table.used();
    }
    s.bytes_per_request[id] = pages * pool_.page_bytes();
  }
  const std::int64_t live = s.tiers[0].live_slots + s.tiers[1].live_slots;
  const std::int64_t allocated = s.tiers[0].allocated_slots + s.tiers[1].allocated_slots;
  s.internal_fragmentation = allocated == 0 ? 0.0 : 1.0 - static_cast<double>(live) / static_cast<double>(allocated);
  s.ids_copied = ids_copied_;
  s.compaction_rounds = rounds_;
  s.compaction_seconds = compaction_seconds_;
  s.preemptions = preemptions_;
  return s;
}

}  // namespace kvcheck
