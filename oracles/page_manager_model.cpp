// The sequential page manager model.
#include "oracles/page_manager_model.h"

#include <algorithm>
#include <stdexcept>

namespace kvcheck {
namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
}  // namespace

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

std::int32_t PageManagerModel::take() {
  const std::int32_t id = free_.front();
  free_.pop_front();
  start_ = (start_ + 1) % pool_pages_;
  return id;
}

void PageManagerModel::admit(std::int64_t request) {
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
  for (const ModelPrompt& p : batch) {
    ModelRequest& r = requests_.at(p.request);
    for (ModelHead& h : r.heads) {
      for (std::int64_t i = 0; i < ceil_div(p.prompt_len, high_tpp_); ++i) h.high_pages.push_back(take());
    }
  }
  // Round 2: keep, convert, top up, recycle.
  for (const ModelPrompt& p : batch) {
    ModelRequest& r = requests_.at(p.request);
    r.prompt_len = p.prompt_len;
    r.prompted = true;
    r.next_position = static_cast<std::int32_t>(p.prompt_len);
    for (std::size_t k = 0; k < r.heads.size(); ++k) {
      ModelHead& h = r.heads[k];
      const ModelPromptHead& plan = p.heads[k];
      const std::vector<std::int32_t> held = h.high_pages;
      const auto high = static_cast<std::size_t>(ceil_div(static_cast<std::int64_t>(plan.high.size()), high_tpp_));
      const auto low = static_cast<std::size_t>(ceil_div(static_cast<std::int64_t>(plan.low.size()), low_tpp_));
      h.high_pages.assign(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(high));
      h.low_pages.clear();
      for (std::size_t i = high; i < held.size() && i < high + low; ++i) h.low_pages.push_back(held[i]);
      while (h.low_pages.size() < low) h.low_pages.push_back(take());
      for (std::size_t i = high + low; i < held.size(); ++i) give(held[i]);
      h.high_live = std::set<std::int32_t>(plan.high.begin(), plan.high.end());
      h.low_live = std::set<std::int32_t>(plan.low.begin(), plan.low.end());
    }
  }
  return ModelOutcome::kOk;
}

ModelOutcome PageManagerModel::decode(const std::vector<ModelDecodeOp>& ops) {
  // Planning: which tier each head needs a page for (-1: none).
  std::vector<int> page_tier(ops.size(), -1);
  std::int64_t need = 0;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const ModelDecodeOp& op = ops[k];
    const ModelHead& h = requests_.at(op.request).heads[static_cast<std::size_t>(op.layer * kv_heads_ + op.head)];
    auto high_live = static_cast<std::int64_t>(h.high_live.size());
    auto low_live = static_cast<std::int64_t>(h.low_live.size());
    if (op.evict) (op.evict->tier == 0 ? high_live : low_live) -= 1;
    if (op.demote) {
      high_live -= 1;
      if (low_live == static_cast<std::int64_t>(h.low_pages.size()) * low_tpp_) page_tier[k] = 1;
      low_live += 1;
    }
    if (high_live == static_cast<std::int64_t>(h.high_pages.size()) * high_tpp_) {
      if (page_tier[k] != -1) throw std::logic_error("page manager model: two new pages for one head");
      page_tier[k] = 0;
    }
    const std::int64_t entries = static_cast<std::int64_t>(h.high_pages.size() + h.low_pages.size());
    if (page_tier[k] != -1) {
      if (entries + 1 > table_length()) return ModelOutcome::kTableFull;
      ++need;
    }
  }
  if (need > static_cast<std::int64_t>(free_.size())) return ModelOutcome::kPoolExhausted;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const ModelDecodeOp& op = ops[k];
    ModelRequest& r = requests_.at(op.request);
    ModelHead& h = r.heads[static_cast<std::size_t>(op.layer * kv_heads_ + op.head)];
    if (page_tier[k] == 0) h.high_pages.push_back(take());
    if (page_tier[k] == 1) h.low_pages.push_back(take());
    if (op.evict) (op.evict->tier == 0 ? h.high_live : h.low_live).erase(op.evict->position);
    if (op.demote) {
      h.high_live.erase(*op.demote);
      h.low_live.insert(*op.demote);
    }
    h.high_live.insert(op.position);
    if (op.position >= r.next_position) r.next_position = op.position + 1;
  }
  return ModelOutcome::kOk;
}

void PageManagerModel::release(std::int64_t request) {
  ModelRequest& r = requests_.at(request);
  for (ModelHead& h : r.heads) {
    for (std::int32_t id : h.high_pages) give(id);
    for (std::int32_t id : h.low_pages) give(id);
  }
  requests_.erase(request);
}

void PageManagerModel::compact() {
  for (auto& [id, r] : requests_) {
    for (ModelHead& h : r.heads) {
      const auto high = static_cast<std::size_t>(ceil_div(static_cast<std::int64_t>(h.high_live.size()), high_tpp_));
      const auto low = static_cast<std::size_t>(ceil_div(static_cast<std::int64_t>(h.low_live.size()), low_tpp_));
      for (std::size_t i = high; i < h.high_pages.size(); ++i) give(h.high_pages[i]);
      for (std::size_t i = low; i < h.low_pages.size(); ++i) give(h.low_pages[i]);
      if (h.high_pages.size() > high) h.high_pages.resize(high);
      if (h.low_pages.size() > low) h.low_pages.resize(low);
    }
  }
}

}  // namespace kvcheck
