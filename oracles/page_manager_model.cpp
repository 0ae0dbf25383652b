// The sequential page manager model.
#include "oracles/page_manager_model.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace kvcheck {
namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
bool live_slot(std::int32_t s) { return s != kModelDead; }
}  // namespace

std::set<std::int32_t> ModelHead::live(int tier) const {
  std::set<std::int32_t> out;
  for (const ModelPage& p : pages[tier]) {
    for (std::int32_t s : p.slots) {
      if (live_slot(s)) out.insert(s);
    }
  }
  return out;
}

std::int64_t ModelHead::live_count(int tier) const {
  std::int64_t n = 0;
  for (const ModelPage& p : pages[tier]) n += std::count_if(p.slots.begin(), p.slots.end(), live_slot);
  return n;
}

std::vector<ModelSlot> ModelHead::walk() const {
  std::vector<ModelSlot> out;
  for (int tier : {0, 1}) {
    for (const ModelPage& p : pages[tier]) {
      for (std::int32_t s : p.slots) {
        if (live_slot(s)) out.push_back(ModelSlot{tier, s});
      }
    }
  }
  return out;
}

PageManagerModel::PageManagerModel(std::int64_t pool_pages, std::int64_t layers, std::int64_t kv_heads,
                                   std::int64_t high_tokens_per_page, std::int64_t low_tokens_per_page,
                                   std::int64_t max_seq_len)
    : pool_pages_(pool_pages),
      layers_(layers),
      kv_heads_(kv_heads),
      high_tpp_(high_tokens_per_page),
      low_tpp_(low_tokens_per_page),
      max_seq_len_(max_seq_len) {
  for (std::int64_t i = 0; i < pool_pages; ++i) free_.push_back(static_cast<std::int32_t>(i));
}

std::int64_t PageManagerModel::table_length() const { return ceil_div(max_seq_len_, high_tpp_) + 1; }

ModelHead& PageManagerModel::head(std::int64_t request, std::int64_t layer, std::int64_t head) {
  return requests_.at(request).heads.at(static_cast<std::size_t>(layer * kv_heads_ + head));
}
const ModelHead& PageManagerModel::head(std::int64_t request, std::int64_t layer, std::int64_t head) const {
  return requests_.at(request).heads.at(static_cast<std::size_t>(layer * kv_heads_ + head));
}

std::int32_t PageManagerModel::take() {
  ++taken_;
  if (free_.empty()) return kModelDead;  // only in a step that is then rejected as exhausted
  const std::int32_t id = free_.front();
  free_.pop_front();
  start_ = (start_ + 1) % pool_pages_;
  return id;
}

ModelPage PageManagerModel::new_page(int tier) {
  const std::int32_t id = take();
  return ModelPage{id, std::vector<std::int32_t>(static_cast<std::size_t>(tokens_per_page(tier)), kModelDead)};
}

std::pair<std::size_t, std::size_t> PageManagerModel::first_dead(ModelHead& h, int tier) {
  for (std::size_t i = 0; i < h.pages[tier].size(); ++i) {
    const std::vector<std::int32_t>& slots = h.pages[tier][i].slots;
    const auto dead = std::find(slots.begin(), slots.end(), kModelDead);
    if (dead != slots.end()) return {i, static_cast<std::size_t>(dead - slots.begin())};
  }
  h.pages[tier].push_back(new_page(tier));
  return {h.pages[tier].size() - 1, 0};
}

void PageManagerModel::admit(std::int64_t request) {
  lineage_.erase(request);
  ModelRequest r;
  r.heads.resize(static_cast<std::size_t>(heads_per_request()));
  requests_.emplace(request, std::move(r));
}

ModelOutcome PageManagerModel::prompt(const std::vector<ModelPrompt>& batch) {
  std::int64_t need = 0;
  for (const ModelPrompt& p : batch) {
    const std::int64_t conservative = ceil_div(p.prompt_len, high_tpp_);
    for (const ModelPromptHead& h : p.heads) {
      const std::int64_t kept = ceil_div(static_cast<std::int64_t>(h.high.size()), high_tpp_) +
                                ceil_div(static_cast<std::int64_t>(h.low.size()), low_tpp_);
      if (kept > table_length() || conservative > table_length()) return ModelOutcome::kTableFull;
      need += conservative + std::max<std::int64_t>(0, kept - conservative);
    }
  }
  if (need > static_cast<std::int64_t>(free_.size())) return ModelOutcome::kPoolExhausted;
  // Round 1: conservative high pages for every prompt token.
  std::map<std::int64_t, std::vector<std::vector<std::int32_t>>> held;  // request -> head -> ids
  for (const ModelPrompt& p : batch) {
    std::vector<std::vector<std::int32_t>>& ids = held[p.request];
    ids.resize(static_cast<std::size_t>(heads_per_request()));
    for (std::vector<std::int32_t>& head : ids) {
      for (std::int64_t i = 0; i < ceil_div(p.prompt_len, high_tpp_); ++i) head.push_back(take());
    }
  }
  // Round 2: keep, convert, top up, recycle; then the tokens, packed per tier.
  for (const ModelPrompt& p : batch) {
    ModelRequest& r = requests_.at(p.request);
    r.prompt_len = p.prompt_len;
    r.prompted = true;
    r.next_position = static_cast<std::int32_t>(p.prompt_len);
    for (std::size_t k = 0; k < r.heads.size(); ++k) {
      ModelHead& h = r.heads[k];
      const std::vector<std::int32_t>& ids = held.at(p.request)[k];
      const ModelPromptHead& plan = p.heads[k];
      const std::vector<std::int32_t>* kept[2] = {&plan.high, &plan.low};
      std::size_t next = 0;
      for (int tier : {0, 1}) {
        const std::int64_t tpp = tokens_per_page(tier);
        h.pages[tier].clear();
        for (std::int64_t i = 0; i < ceil_div(static_cast<std::int64_t>(kept[tier]->size()), tpp); ++i) {
          ModelPage page{next < ids.size() ? ids[next++] : take(),
                         std::vector<std::int32_t>(static_cast<std::size_t>(tpp), kModelDead)};
          for (std::int64_t s = 0; s < tpp && i * tpp + s < static_cast<std::int64_t>(kept[tier]->size()); ++s) {
            page.slots[static_cast<std::size_t>(s)] = (*kept[tier])[static_cast<std::size_t>(i * tpp + s)];
          }
          h.pages[tier].push_back(std::move(page));
        }
      }
      for (; next < ids.size(); ++next) give(ids[next]);
    }
  }
  return ModelOutcome::kOk;
}

void PageManagerModel::decode_head(ModelHead& h, const ModelDecodeOp& op) {
  std::vector<ModelPage>& high = h.pages[0];
  auto kill = [](ModelPage& page, std::int32_t position) {
    *std::find(page.slots.begin(), page.slots.end(), position) = kModelDead;
  };
  auto page_of = [&](int tier, std::int32_t position) -> ModelPage& {
    for (ModelPage& p : h.pages[tier]) {
      if (std::find(p.slots.begin(), p.slots.end(), position) != p.slots.end()) return p;
    }
    throw std::logic_error("page manager model: the position is not live");
  };
  auto put_first_dead = [&](int tier, std::int32_t position) {
    const auto [page, slot] = first_dead(h, tier);
    h.pages[tier][page].slots[slot] = position;
  };
  if (op.flush && h.live_count(0) > 0) {
    for (ModelPage& p : high) {
      for (std::int32_t& s : p.slots) {
        if (!live_slot(s)) continue;
        put_first_dead(1, s);
        s = kModelDead;
      }
    }
    for (std::size_t i = 1; i < high.size(); ++i) give(high[i].id);
    high.resize(1);
    high[0].slots[0] = op.position;
    return;
  }
  if (op.slots == ModelSlots::kSlotReuse || op.flush) {
    if (op.evict) kill(page_of(op.evict->tier, op.evict->position), op.evict->position);
    if (op.demote) {
      kill(page_of(0, *op.demote), *op.demote);
      put_first_dead(1, *op.demote);
    }
    put_first_dead(0, op.position);
    return;
  }
  // The appending strategies: the slot after the last live one of the last high page, now.
  std::optional<std::pair<std::int32_t, std::size_t>> at;  // page id, slot
  if (!high.empty()) {
    const std::vector<std::int32_t>& slots = high.back().slots;
    const auto last = std::find_if(slots.rbegin(), slots.rend(), live_slot);
    const auto next = static_cast<std::size_t>(slots.rend() - last);
    if (next < slots.size()) at = std::pair{high.back().id, next};
  }
  if (op.evict) {
    ModelPage& victim = page_of(op.evict->tier, op.evict->position);
    kill(victim, op.evict->position);
    if (op.slots == ModelSlots::kFreeBlock && std::none_of(victim.slots.begin(), victim.slots.end(), live_slot) &&
        !(at && at->first == victim.id)) {
      give(victim.id);
      std::vector<ModelPage>& side = h.pages[op.evict->tier];
      side.erase(std::find_if(side.begin(), side.end(), [&](const ModelPage& p) { return p.id == victim.id; }));
    }
  }
  if (!at) {
    high.push_back(new_page(0));
    at = std::pair{high.back().id, std::size_t{0}};
  }
  for (ModelPage& p : high) {
    if (p.id == at->first) p.slots[at->second] = op.position;
  }
}

std::optional<std::size_t> PageManagerModel::append_page(const ModelHead& h, const ModelDecodeOp& op) const {
  const std::vector<ModelPage>& high = h.pages[0];
  if (op.slots == ModelSlots::kSlotReuse || op.flush) {  // the first dead high slot
    for (std::size_t i = 0; i < high.size(); ++i) {
      if (std::find(high[i].slots.begin(), high[i].slots.end(), kModelDead) != high[i].slots.end()) return i;
    }
    return std::nullopt;
  }
  if (high.empty()) return std::nullopt;  // after the last live slot of the last high page
  const std::vector<std::int32_t>& slots = high.back().slots;
  if (live_slot(slots.back())) return std::nullopt;
  return high.size() - 1;
}

ModelOutcome PageManagerModel::decode(const std::vector<ModelDecodeOp>& ops) {
  for (const ModelDecodeOp& op : ops) {
    if (holds_shared(head(op.request, op.layer, op.head)) && (op.evict || op.demote || op.flush)) {
      return ModelOutcome::kRejected;
    }
  }
  // The step runs on a copy, kept only when it fits. Copy-on-write first, in op order.
  PageManagerModel next = *this;
  for (const ModelDecodeOp& op : ops) {
    ModelHead& h = next.head(op.request, op.layer, op.head);
    const std::optional<std::size_t> at = next.append_page(h, op);
    if (!at || next.refcount(h.pages[0][*at].id) < 2) continue;
    ModelPage& page = h.pages[0][*at];
    page.id = next.take();
    next.copies_ += 1;
  }
  bool table_full = false;
  for (const ModelDecodeOp& op : ops) {
    ModelHead& h = next.head(op.request, op.layer, op.head);
    const std::int64_t entries = static_cast<std::int64_t>(h.pages[0].size() + h.pages[1].size());
    const std::int64_t taken = next.taken_;
    next.decode_head(h, op);
    if (next.taken_ > taken && entries + (next.taken_ - taken) > table_length()) table_full = true;
    ModelRequest& r = next.requests_.at(op.request);
    if (op.position >= r.next_position) r.next_position = op.position + 1;
  }
  if (table_full) return ModelOutcome::kTableFull;
  if (next.taken_ - taken_ > static_cast<std::int64_t>(free_.size())) return ModelOutcome::kPoolExhausted;
  if (std::any_of(ops.begin(), ops.end(), [](const ModelDecodeOp& op) {
        return op.slots == ModelSlots::kSparseCopy && op.evict.has_value();
      })) {
    next.repack();
  }
  *this = std::move(next);
  return ModelOutcome::kOk;
}

void PageManagerModel::release(std::int64_t request) {
  ModelRequest& r = requests_.at(request);
  for (ModelHead& h : r.heads) {
    for (int tier : {0, 1}) {
      for (const ModelPage& p : h.pages[tier]) {
        if (refcount(p.id) == 1) give(p.id);
      }
    }
  }
  requests_.erase(request);
}

ModelOutcome PageManagerModel::share(std::int64_t from, std::int64_t to, std::int64_t tokens) {
  const ModelRequest& source = requests_.at(from);
  ModelRequest& target = requests_.at(to);
  if (from == to || !source.prompted || target.prompted || tokens <= 0) return ModelOutcome::kRejected;
  const auto pages = static_cast<std::size_t>(ceil_div(tokens, high_tpp_));
  for (const ModelHead& h : source.heads) {
    if (h.pages[0].size() < pages) return ModelOutcome::kRejected;
    std::int64_t live = 0;
    for (std::size_t i = 0; i < pages; ++i) {
      live += std::count_if(h.pages[0][i].slots.begin(), h.pages[0][i].slots.end(), live_slot);
    }
    if (live != tokens) return ModelOutcome::kRejected;
  }
  for (std::size_t k = 0; k < target.heads.size(); ++k) {
    const std::vector<ModelPage>& high = source.heads[k].pages[0];
    target.heads[k].pages[0].assign(high.begin(), high.begin() + static_cast<std::ptrdiff_t>(pages));
  }
  target.prompt_len = tokens;
  target.prompted = true;
  target.next_position = source.next_position;
  lineage_[to] = {from, source.next_position};
  return ModelOutcome::kOk;
}

ModelOutcome PageManagerModel::extend(std::int64_t request, std::int64_t tokens) {
  ModelRequest& r = requests_.at(request);
  if (!r.prompted || tokens <= 0) return ModelOutcome::kRejected;
  const std::int64_t pages = ceil_div(tokens, high_tpp_);
  for (const ModelHead& h : r.heads) {
    if (!h.pages[1].empty() || h.live_count(0) != static_cast<std::int64_t>(h.pages[0].size()) * high_tpp_) {
      return ModelOutcome::kRejected;
    }
  }
  for (const ModelHead& h : r.heads) {
    if (static_cast<std::int64_t>(h.pages[0].size()) + pages > table_length()) return ModelOutcome::kTableFull;
  }
  if (heads_per_request() * pages > static_cast<std::int64_t>(free_.size())) return ModelOutcome::kPoolExhausted;
  // The extended positions are the request's own, whatever its source held beyond the share.
  if (auto it = lineage_.find(request); it != lineage_.end()) {
    it->second.second = std::min(it->second.second, static_cast<std::int32_t>(r.heads.front().live_count(0)));
  }
  for (ModelHead& h : r.heads) {
    const std::int64_t first = h.live_count(0);
    for (std::int64_t i = 0; i < pages; ++i) {
      ModelPage page{take(), std::vector<std::int32_t>(static_cast<std::size_t>(high_tpp_), kModelDead)};
      for (std::int64_t s = 0; s < high_tpp_ && i * high_tpp_ + s < tokens; ++s) {
        page.slots[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(first + i * high_tpp_ + s);
      }
      h.pages[0].push_back(std::move(page));
    }
  }
  r.next_position = static_cast<std::int32_t>(r.heads.front().live_count(0));
  r.prompt_len = r.next_position;
  return ModelOutcome::kOk;
}

std::int64_t PageManagerModel::refcount(std::int32_t id) const {
  std::int64_t n = 0;
  for (const auto& [rid, r] : requests_) {
    for (const ModelHead& h : r.heads) {
      for (int tier : {0, 1}) {
        n += std::count_if(h.pages[tier].begin(), h.pages[tier].end(), [&](const ModelPage& p) { return p.id == id; });
      }
    }
  }
  return n;
}

bool PageManagerModel::holds_shared(const ModelHead& h) const {
  for (int tier : {0, 1}) {
    for (const ModelPage& p : h.pages[tier]) {
      if (refcount(p.id) > 1) return true;
    }
  }
  return false;
}

std::int64_t PageManagerModel::writer(std::int64_t request, std::int32_t position) const {
  for (auto it = lineage_.find(request); it != lineage_.end() && position < it->second.second;
       it = lineage_.find(request)) {
    request = it->second.first;
  }
  return request;
}

std::string PageManagerModel::sharing_violation() const {
  std::map<std::int32_t, const ModelPage*> seen;  // the first listing of each page
  for (const auto& [rid, r] : requests_) {
    for (const ModelHead& h : r.heads) {
      for (int tier : {0, 1}) {
        for (const ModelPage& p : h.pages[tier]) {
          const auto [it, first] = seen.emplace(p.id, &p);
          if (!first && it->second->slots != p.slots) {
            return "page " + std::to_string(p.id) +
                   " is shared and its tables see different slots (a shared page was written)";
          }
        }
      }
    }
  }
  for (std::int32_t id : free_) {
    if (seen.contains(id)) return "page " + std::to_string(id) + " is free and listed by a table";
  }
  if (static_cast<std::int64_t>(free_.size() + seen.size()) != pool_pages_) {
    return std::to_string(free_.size()) + " free + " + std::to_string(seen.size()) + " listed pages in a pool of " +
           std::to_string(pool_pages_);
  }
  return "";
}

void PageManagerModel::repack() {
  for (auto& [id, r] : requests_) {
    for (ModelHead& h : r.heads) {
      if (holds_shared(h)) continue;
      for (int tier : {0, 1}) {
        std::vector<ModelPage>& pages = h.pages[tier];
        const auto keep = static_cast<std::size_t>(ceil_div(h.live_count(tier), tokens_per_page(tier)));
        for (std::size_t i = keep; i < pages.size(); ++i) {
          for (std::int32_t& s : pages[i].slots) {
            if (!live_slot(s)) continue;
            const auto [page, slot] = first_dead(h, tier);  // in a kept page: they have room
            pages[page].slots[slot] = s;
            s = kModelDead;
          }
        }
        for (std::size_t i = keep; i < pages.size(); ++i) give(pages[i].id);
        if (pages.size() > keep) pages.resize(keep);
      }
    }
  }
}

}  // namespace kvcheck
