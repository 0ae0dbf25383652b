// LeanKV's page manager: every change of pages goes through a compaction round.
#include "optimized/unified_page_manager.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "optimized/pool_exhausted.h"
#include "reference/errors.h"

namespace kvcheck {

UnifiedPageManager::UnifiedPageManager(PageManagerConfig config)
    : config_(std::move(config)), pool_(config_.pool), list_(config_.pool.pages) {
  if (pool_.tiers() != kTiers) {
    throw input_error("page manager", "tiers", "needs 2 tiers (high, low), got {}", pool_.tiers());
  }
  if (config_.layers <= 0 || config_.layers > INT32_MAX) {
    throw input_error("page manager", "layers", "must be in [1, {}], got {}", INT32_MAX, config_.layers);
  }
  if (config_.kv_heads <= 0 || config_.kv_heads > INT32_MAX) {
    throw input_error("page manager", "kv_heads", "must be in [1, {}], got {}", INT32_MAX, config_.kv_heads);
  }
  table_length_ = PageTable::length_for(config_.max_seq_len, pool_.tokens_per_page(kHighTier));
  extra_refs_.assign(static_cast<std::size_t>(config_.pool.pages), 0);
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

std::size_t UnifiedPageManager::head_index(std::int64_t request, std::int32_t layer, std::int32_t head,
                                           const char* operation) const {
  if (layer < 0 || layer >= config_.layers || head < 0 || head >= config_.kv_heads) {
    throw input_error(HeadKey{request, layer, head}.where(), operation, "no such layer / kv-head ({} x {})",
                      config_.layers, config_.kv_heads);
  }
  return static_cast<std::size_t>(layer * config_.kv_heads + head);
}

// The request is looked up first, so an unknown request is named as such whatever the head.
UnifiedPageManager::HeadState& UnifiedPageManager::head_state(std::int64_t request, std::int32_t layer,
                                                              std::int32_t head, const char* operation) {
  RequestState& r = request_state(request, operation);
  return r.heads[head_index(request, layer, head, operation)];
}
const UnifiedPageManager::HeadState& UnifiedPageManager::head_state(std::int64_t request, std::int32_t layer,
                                                                    std::int32_t head, const char* operation) const {
  const RequestState& r = request_state(request, operation);
  return r.heads[head_index(request, layer, head, operation)];
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

std::int64_t UnifiedPageManager::refcount(PageId id) const {
  if (id < 0 || id >= list_.pool_size()) throw std::out_of_range(fmt::format("page manager: page {} out of range", id));
  return pool_.owner(id).free() ? 0 : 1 + extra_refs_[static_cast<std::size_t>(id)];
}

bool UnifiedPageManager::holds_shared(const HeadState& h) const {
  for (int tier : {kHighTier, kLowTier}) {
    for (std::int64_t i = 0; i < h.table.count(tier); ++i) {
      if (extra_refs_[static_cast<std::size_t>(h.table.at(tier, i))] > 0) return true;
    }
  }
  return false;
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
          PageTable(HeadKey{request, static_cast<std::int32_t>(l), static_cast<std::int32_t>(k)}, table_length_), {}});
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
    TierDemand demand[kTiers];
    demand[kHighTier] = {plans[i]->high, conservative[i], a};
    demand[kLowTier] = {plans[i]->low, 0, b};
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

// ---- generation: one plan per head ---------------------------------------------------------

SlotRef UnifiedPageManager::nth_live(const HeadState& h, std::size_t index) const {
  auto n = static_cast<std::int64_t>(index);
  for (int tier : {kHighTier, kLowTier}) {
    for (std::int64_t i = 0; i < h.table.count(tier); ++i) {
      const PageId id = h.table.at(tier, i);
      const std::int64_t live = pool_.live_count(id);
      if (n >= live) {
        n -= live;
        continue;
      }
      for (std::int64_t s = 0;; ++s) {
        if (pool_.live(id, s) && n-- == 0) return SlotRef{tier, i, s};
      }
    }
  }
  throw std::logic_error(fmt::format("page manager: {} holds fewer live slots than it counts", h.table.key().where()));
}

void UnifiedPageManager::live_slots(std::int64_t request, std::int32_t layer, std::int32_t head,
                                    std::vector<SlotRef>& slots) const {
  const HeadState& h = head_state(request, layer, head, "live_slots");
  slots.clear();
  for (int tier : {kHighTier, kLowTier}) {
    for (std::int64_t i = 0; i < h.table.count(tier); ++i) {
      const PageId id = h.table.at(tier, i);
      for (std::int64_t s = 0; s < pool_.tokens_per_page(tier); ++s) {
        if (pool_.live(id, s)) slots.push_back(SlotRef{tier, i, s});
      }
    }
  }
}

SlotRef UnifiedPageManager::live_slot(std::int64_t request, std::int32_t layer, std::int32_t head,
                                      std::size_t index) const {
  const HeadState& h = head_state(request, layer, head, "live_slot");
  const std::int64_t live = h.live[kHighTier] + h.live[kLowTier];
  if (index >= static_cast<std::size_t>(live)) {
    throw input_error(h.table.key().where(), "live_slot", "live token {}: the head holds {}", index, live);
  }
  return nth_live(h, index);
}

UnifiedPageManager::HeadStep UnifiedPageManager::resolve_step(const DecodeHead& op) {
  HeadState& h = head_state(op.head.request, op.head.layer, op.head.head, "decode step");
  const std::string where = h.table.key().where();
  if (!requests_.at(op.head.request).prompted) throw input_error(where, "decode step", "the prompt phase has not run");
  const StepDecision& d = op.decision;
  if ((d.evict || d.demote || d.flush) && holds_shared(h)) {
    throw input_error(where, "decode step", "the head holds shared pages: it only appends (no evict, demote or flush)");
  }
  if (d.flush && (d.evict || d.demote)) {
    throw input_error(where, "flush", "moves every high token to low; it takes no victim or demotion");
  }
  const std::int64_t live = h.live[kHighTier] + h.live[kLowTier];
  HeadStep s;
  s.head = &h;
  s.op = &op;
  for (const auto& [index, slot, what] : {std::tuple{d.evict, &s.evict, "evict"}, std::tuple{d.demote, &s.demote, "demote"}}) {
    if (!index) continue;
    if (*index >= static_cast<std::size_t>(live)) {
      throw input_error(where, what, "live token {}: the head holds {}", *index, live);
    }
    *slot = nth_live(h, *index);
  }
  if (d.demote) {
    if (op.slots != SlotStrategy::kSlotReuse) {
      throw input_error(where, "demote", "takes a freed slot; the {} strategy reuses none", slot_strategy_name(op.slots));
    }
    if (s.demote->tier != kHighTier) throw input_error(where, "demote", "only a high token can be demoted");
    if (d.evict && *d.evict == *d.demote) throw input_error(where, "demote", "the token is also the victim");
  }
  return s;
}

// Slot-reuse: the victim's and the demoted token's slots are reused; a tier gets a page only when
// its pages are full without them (never both tiers: a demotion frees a high slot).
void UnifiedPageManager::plan_reuse(HeadStep& s) const {
  const HeadState& h = *s.head;
  std::int64_t live[kTiers];
  std::copy(std::begin(h.live), std::end(h.live), std::begin(live));
  int tier = -1;
  if (s.evict) live[s.evict->tier] -= 1;
  if (s.demote) {
    live[kHighTier] -= 1;
    if (live[kLowTier] == h.table.count(kLowTier) * pool_.tokens_per_page(kLowTier)) tier = kLowTier;
  }
  if (live[kHighTier] == h.table.count(kHighTier) * pool_.tokens_per_page(kHighTier)) tier = kHighTier;
  if (tier >= 0) s.new_pages[tier] = 1;
}

// No-op, free-block, sparse-copy: the new token goes after the last live slot of the last high
// page (before the eviction), or into a new high page; free-block returns the victim's page when
// the victim was its last live token (unless the new token goes there).
void UnifiedPageManager::plan_append(HeadStep& s) const {
  const HeadState& h = *s.head;
  const std::int64_t pages = h.table.count(kHighTier);
  if (pages > 0) {
    const PageId last = h.table.at(kHighTier, pages - 1);
    const std::int64_t next = pool_.last_live_slot(last) + 1;
    if (next < pool_.tokens_per_page(kHighTier)) s.append_at = std::pair{last, next};
  }
  if (!s.append_at) {
    s.new_pages[kHighTier] = 1;
    s.append_at = std::pair{kNoPage, std::int64_t{0}};
  }
  if (s.op->slots == SlotStrategy::kFreeBlock && s.evict) {
    const PageId victim = h.table.at(s.evict->tier, s.evict->page_index);
    if (pool_.live_count(victim) == 1 && victim != s.append_at->first) {
      s.drop.push_back(PageRef{s.evict->tier, s.evict->page_index});
    }
  }
}

// A flush: the low pages every high token needs, and the high pages but the first (the new token
// takes its slot 0) back to the list.
void UnifiedPageManager::plan_flush(HeadStep& s) const {
  const HeadState& h = *s.head;
  s.flush = true;
  s.new_pages[kLowTier] = std::max<std::int64_t>(
      0, pages_for(h.live[kLowTier] + h.live[kHighTier], pool_.tokens_per_page(kLowTier)) - h.table.count(kLowTier));
  for (std::int64_t i = 1; i < h.table.count(kHighTier); ++i) s.drop.push_back(PageRef{kHighTier, i});
}

// The page each step's new token goes to, when it is a shared one the head holds: copied first.
// An op whose page the earlier ops of the step copy down to one reference writes it in place.
void UnifiedPageManager::plan_copies(std::vector<HeadStep>& steps) {
  std::map<PageId, std::int32_t> copied;
  for (HeadStep& s : steps) {
    if (!holds_shared(*s.head)) continue;
    const PageTable& t = s.head->table;
    std::optional<std::int64_t> index;
    if (!s.append_at) {
      if (const std::optional<SlotRef> slot = free_slot(*s.head, kHighTier)) index = slot->page_index;
    } else if (s.append_at->first != kNoPage) {
      index = t.count(kHighTier) - 1;
    }
    if (!index) continue;
    const PageId id = t.at(kHighTier, *index);
    if (extra_refs_[static_cast<std::size_t>(id)] - copied[id] > 0) {
      s.copy = index;
      copied[id] += 1;
    }
  }
}

// The copies, in a round of their own (the new pages in op order), then the counts.
void UnifiedPageManager::copy_on_write(std::vector<HeadStep>& steps) {
  std::vector<std::int64_t> allocate(steps.size(), 0);
  std::vector<PageId> from(steps.size(), kNoPage);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    if (!steps[i].copy) continue;
    allocate[i] = 1;
    from[i] = steps[i].head->table.at(kHighTier, *steps[i].copy);
  }
  if (std::none_of(allocate.begin(), allocate.end(), [](std::int64_t a) { return a > 0; })) return;
  const std::vector<std::int64_t> none(steps.size(), 0);
  record(kvcheck::compaction_round(list_, allocate, none, config_.compaction, [&](std::int64_t k, std::int64_t at, std::int64_t) {
    HeadStep& s = steps[static_cast<std::size_t>(k)];
    if (!s.copy) return;
    const PageId id = list_.id_at(at);
    const PageId old = from[static_cast<std::size_t>(k)];
    pool_.format(id, PageOwner{s.head->table.key(), kHighTier});
    pool_.copy_page(old, id);
    s.head->table.replace(kHighTier, *s.copy, id);
    if (s.append_at && s.append_at->first == old) s.append_at->first = id;
  }));
  for (PageId id : from) {
    if (id == kNoPage) continue;
    extra_refs_[static_cast<std::size_t>(id)] -= 1;
    cow_copies_ += 1;
  }
}

void UnifiedPageManager::move_to_low(HeadState& h, PageId from, std::int64_t slot) {
  const TokenPayload payload = pool_.backed() ? pool_.payload(from, slot) : TokenPayload{};
  pool_.kill(from, slot);
  const SlotRef to = free_slot(h, kLowTier).value();
  pool_.put(h.table.at(kLowTier, to.page_index), to.slot, payload);
  h.live[kHighTier] -= 1;
  h.live[kLowTier] += 1;
}

void UnifiedPageManager::apply_step(HeadStep& s, std::int64_t at, std::int64_t to) {
  HeadState& h = *s.head;
  if (s.evict) {
    pool_.kill(h.table.at(s.evict->tier, s.evict->page_index), s.evict->slot);
    h.live[s.evict->tier] -= 1;
  }
  PageId new_high = kNoPage;
  for (int tier : {kHighTier, kLowTier}) {
    for (std::int64_t j = 0; j < s.new_pages[tier]; ++j) {
      const PageId id = list_.id_at(at++);
      pool_.format(id, PageOwner{h.table.key(), tier});
      h.table.push(tier, id);
      if (tier == kHighTier) new_high = id;
    }
  }
  if (s.flush) {  // every live high token, in walk order
    for (std::int64_t p = 0; p < h.table.count(kHighTier); ++p) {
      const PageId from = h.table.at(kHighTier, p);
      for (std::int64_t slot = 0; slot < pool_.tokens_per_page(kHighTier); ++slot) {
        if (pool_.live(from, slot)) move_to_low(h, from, slot);
      }
    }
  }
  if (s.demote) move_to_low(h, h.table.at(kHighTier, s.demote->page_index), s.demote->slot);
  std::vector<PageId> dropped;
  for (const PageRef& r : s.drop) dropped.push_back(h.table.at(r.tier, r.page_index));
  for (auto r = s.drop.rbegin(); r != s.drop.rend(); ++r) h.table.erase(r->tier, r->page_index);
  for (std::size_t j = 0; j < dropped.size(); ++j) {
    list_.put_at(to + static_cast<std::int64_t>(j), dropped[j]);
    pool_.release(dropped[j]);
  }
  if (s.append_at) {
    pool_.put(s.append_at->first == kNoPage ? new_high : s.append_at->first, s.append_at->second, s.op->token);
  } else {
    const SlotRef slot = free_slot(h, kHighTier).value();
    pool_.put(h.table.at(kHighTier, slot.page_index), slot.slot, s.op->token);
  }
  h.live[kHighTier] += 1;
}

void UnifiedPageManager::decode_step(std::span<const DecodeHead> heads) {
  // Validation, before anything changes.
  std::vector<HeadStep> steps;
  steps.reserve(heads.size());
  std::set<HeadState*> seen;
  for (const DecodeHead& op : heads) {
    steps.push_back(resolve_step(op));
    if (!seen.insert(steps.back().head).second) {
      throw input_error(steps.back().head->table.key().where(), "decode step", "two ops for one head in one step");
    }
  }
  // One plan per head (a flush of a head without high tokens is a plain slot-reuse append).
  const auto n = static_cast<std::int64_t>(steps.size());
  for_each_head(n, config_.compaction, [&](std::int64_t k) {
    HeadStep& s = steps[static_cast<std::size_t>(k)];
    if (s.op->decision.flush && s.head->live[kHighTier] > 0) plan_flush(s);
    else if (s.op->slots != SlotStrategy::kSlotReuse && !s.op->decision.flush) plan_append(s);
    else plan_reuse(s);
  });
  std::vector<std::int64_t> allocate(steps.size()), recycle(steps.size());
  for (std::size_t i = 0; i < steps.size(); ++i) {
    allocate[i] = steps[i].allocate();
    recycle[i] = static_cast<std::int64_t>(steps[i].drop.size());
    if (allocate[i] > 0) steps[i].head->table.require_room(allocate[i]);
  }
  plan_copies(steps);
  if (std::any_of(steps.begin(), steps.end(), [](const HeadStep& s) { return s.copy.has_value(); })) {
    // Both rounds are checked before either runs.
    std::int64_t need = 0;
    for (std::size_t i = 0; i < steps.size(); ++i) need += allocate[i] + (steps[i].copy ? 1 : 0);
    if (need > list_.free_count()) throw PoolExhausted("decode step", need, list_.free_count());
    copy_on_write(steps);
  }
  record(kvcheck::compaction_round(list_, allocate, recycle, config_.compaction, [&](std::int64_t k, std::int64_t at,
                                                                             std::int64_t to) {
    apply_step(steps[static_cast<std::size_t>(k)], at, to);
  }));
  // SpvLLM's sparse copy: the live tokens packed into as few pages as they need.
  if (std::any_of(heads.begin(), heads.end(), [](const DecodeHead& op) {
        return op.slots == SlotStrategy::kSparseCopy && op.decision.evict.has_value();
      })) {
    repack();
  }
}

// ---- compaction and release -----------------------------------------------------------------

void UnifiedPageManager::repack() {
  std::int64_t tpp[kTiers];
  for (int tier : {kHighTier, kLowTier}) tpp[tier] = pool_.tokens_per_page(tier);
  std::vector<HeadState*> heads;
  for (auto& [id, r] : requests_) {
    for (HeadState& h : r.heads) heads.push_back(&h);
  }
  const auto n = static_cast<std::int64_t>(heads.size());
  std::vector<std::int64_t> recycle(heads.size(), 0);
  const std::vector<std::int64_t> none(heads.size(), 0);
  std::vector<char> shared(heads.size(), 0);  // heads that hold a shared page stay as they are
  for_each_head(n, config_.compaction, [&](std::int64_t k) {
    const HeadState& h = *heads[static_cast<std::size_t>(k)];
    if (holds_shared(h)) {
      shared[static_cast<std::size_t>(k)] = 1;
      return;
    }
    TierDemand demand[kTiers];
    for (int tier : {kHighTier, kLowTier}) demand[tier] = {h.live[tier], h.table.count(tier), tpp[tier]};
    recycle[static_cast<std::size_t>(k)] = plan_head(demand, /*convertible=*/false).recycle;
  });
  record(kvcheck::compaction_round(list_, none, recycle, config_.compaction, [&](std::int64_t k, std::int64_t, std::int64_t to) {
    if (shared[static_cast<std::size_t>(k)]) return;
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
  std::vector<std::int64_t> recycle(r.heads.size());
  const std::vector<std::int64_t> none(r.heads.size(), 0);
  // A shared page's count drops; it returns to the list when no other table lists it. The heads
  // of one request list distinct pages (sharing pairs a head with the same head of another).
  for (std::size_t k = 0; k < r.heads.size(); ++k) {
    const PageTable& t = r.heads[k].table;
    for (int tier : {kHighTier, kLowTier}) {
      for (std::int64_t i = 0; i < t.count(tier); ++i) {
        recycle[k] += extra_refs_[static_cast<std::size_t>(t.at(tier, i))] == 0;
      }
    }
  }
  record(kvcheck::compaction_round(list_, none, recycle, config_.compaction, [&](std::int64_t k, std::int64_t, std::int64_t to) {
    HeadState& h = r.heads[static_cast<std::size_t>(k)];
    std::int64_t written = 0;
    for (int tier : {kHighTier, kLowTier}) {
      for (std::int64_t i = 0; i < h.table.count(tier); ++i) {
        const PageId id = h.table.at(tier, i);
        if (extra_refs_[static_cast<std::size_t>(id)] > 0) {
          extra_refs_[static_cast<std::size_t>(id)] -= 1;
          continue;
        }
        list_.put_at(to + written++, id);
        pool_.release(id);
      }
    }
    h.table.clear();
    h.live[kHighTier] = h.live[kLowTier] = 0;
  }));
  requests_.erase(request);
}

void UnifiedPageManager::finish(std::int64_t request) { release(request); }

void UnifiedPageManager::share_prefix(std::int64_t from, std::int64_t to, std::int64_t tokens) {
  const std::string where = fmt::format("share_prefix from request {} to request {}", from, to);
  RequestState& source = request_state(from, "share_prefix");
  RequestState& target = request_state(to, "share_prefix");
  if (from == to) throw input_error(where, "to", "a request cannot share with itself");
  if (!source.prompted) throw input_error(where, "from", "the prompt phase has not run");
  if (target.prompted) throw input_error(where, "to", "already prompted");
  if (tokens <= 0) throw input_error(where, "tokens", "must be positive, got {}", tokens);
  const std::int64_t pages = pages_for(tokens, pool_.tokens_per_page(kHighTier));
  for (const HeadState& h : source.heads) {
    std::int64_t live = 0;
    for (std::int64_t i = 0; i < std::min(pages, h.table.count(kHighTier)); ++i) {
      live += pool_.live_count(h.table.at(kHighTier, i));
    }
    if (h.table.count(kHighTier) < pages || live != tokens) {
      throw input_error(h.table.key().where(), "share_prefix",
                        "its first {} high page(s) (of {}) hold {} live tokens, not the {} shared", pages,
                        h.table.count(kHighTier), live, tokens);
    }
  }
  for (std::size_t k = 0; k < source.heads.size(); ++k) {
    HeadState& h = target.heads[k];
    for (std::int64_t i = 0; i < pages; ++i) {
      const PageId id = source.heads[k].table.at(kHighTier, i);
      h.table.push(kHighTier, id);
      extra_refs_[static_cast<std::size_t>(id)] += 1;
    }
    h.live[kHighTier] = tokens;
  }
  target.prompted = true;
}

void UnifiedPageManager::extend(std::int64_t request, std::int64_t tokens) {
  const std::string where = fmt::format("extend request {}", request);
  RequestState& r = request_state(request, "extend");
  if (!r.prompted) throw input_error(where, "request", "the prompt phase has not run (share_prefix first)");
  if (tokens <= 0) throw input_error(where, "tokens", "must be positive, got {}", tokens);
  const std::int64_t a = pool_.tokens_per_page(kHighTier);
  const std::int64_t pages = pages_for(tokens, a);
  for (const HeadState& h : r.heads) {
    if (h.table.count(kLowTier) != 0 || h.live[kHighTier] != h.table.count(kHighTier) * a) {
      throw input_error(h.table.key().where(), "extend", "{} live tokens in {} high and {} low pages: extend needs whole "
                        "high pages only", h.live[kHighTier] + h.live[kLowTier], h.table.count(kHighTier),
                        h.table.count(kLowTier));
    }
    h.table.require_room(pages);
  }
  const auto n = static_cast<std::int64_t>(r.heads.size());
  if (n * pages > list_.free_count()) throw PoolExhausted(where, n * pages, list_.free_count());
  const std::vector<std::int64_t> allocate(static_cast<std::size_t>(n), pages), none(static_cast<std::size_t>(n), 0);
  record(kvcheck::compaction_round(list_, allocate, none, config_.compaction, [&](std::int64_t k, std::int64_t at, std::int64_t) {
    HeadState& h = r.heads[static_cast<std::size_t>(k)];
    const std::int64_t first = h.live[kHighTier];
    for (std::int64_t i = 0; i < pages; ++i) {
      const PageId id = list_.id_at(at + i);
      pool_.format(id, PageOwner{h.table.key(), kHighTier});
      h.table.push(kHighTier, id);
      for (std::int64_t s = 0; s < a && i * a + s < tokens; ++s) {
        pool_.put(id, s, TokenPayload{static_cast<std::int32_t>(first + i * a + s), 0.0f});
      }
    }
    h.live[kHighTier] = first + tokens;
  }));
}

void UnifiedPageManager::preempt(std::int64_t request) {
  release(request);
  ++preemptions_;
}

PageManagerStats UnifiedPageManager::stats() const {
  PageManagerStats s;
  s.pool_pages = list_.pool_size();
  s.free_pages = list_.free_count();
  s.tiers.resize(kTiers);
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
  const std::int64_t live = s.tiers[kHighTier].live_slots + s.tiers[kLowTier].live_slots;
  const std::int64_t allocated = s.tiers[kHighTier].allocated_slots + s.tiers[kLowTier].allocated_slots;
  s.internal_fragmentation = allocated == 0 ? 0.0 : 1.0 - static_cast<double>(live) / static_cast<double>(allocated);
  s.ids_copied = ids_copied_;
  s.compaction_rounds = rounds_;
  s.compaction_seconds = compaction_seconds_;
  s.preemptions = preemptions_;
  for (std::int32_t extra : extra_refs_) {
    s.shared_pages += extra > 0;
    s.shared_references += extra;
  }
  s.cow_copies = cow_copies_;
  return s;
}

}  // namespace kvcheck
