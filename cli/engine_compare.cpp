#include "cli/engine_compare.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "reference/errors.h"

namespace kvcheck::cli {

PositionComparison compare_position_topk(std::span<const float> ref_logits, std::span<const TopkEntry> entries) {
  const std::vector<double> lp = log_softmax(ref_logits);
  PositionComparison c;
  double kl = 0.0, p_in = 0.0, q_in = 0.0;
  const TopkEntry* top = nullptr;
  const std::int32_t ref_top = top_token(ref_logits);
  double q_ref_top = 0.0;
  for (const TopkEntry& e : entries) {
    const double lp_ref = lp[static_cast<std::size_t>(e.token)];
    if (lp_ref != -std::numeric_limits<double>::infinity()) kl += std::exp(lp_ref) * (lp_ref - e.logprob);
    p_in += std::exp(lp_ref);
    q_in += std::exp(e.logprob);
    if (!top || e.logprob > top->logprob || (e.logprob == top->logprob && e.token < top->token)) top = &e;
    if (e.token == ref_top) q_ref_top = std::exp(e.logprob);
  }
  if (entries.size() < lp.size()) {  // the rest of the vocabulary as one bucket
    const double p_rest = std::max(0.0, 1.0 - p_in), q_rest = std::max(0.0, 1.0 - q_in);
    if (p_rest > 0.0) kl += q_rest > 0.0 ? p_rest * (std::log(p_rest) - std::log(q_rest)) : std::numeric_limits<double>::infinity();
  }
  c.kl = std::isnan(kl) ? kl : std::max(kl, 0.0);
  c.same_top = ref_top >= 0 && top && top->token == ref_top;
  c.delta_p = ref_top < 0 ? std::nan("") : q_ref_top - std::exp(lp[static_cast<std::size_t>(ref_top)]);
  return c;
}

double reference_topk_coverage(std::span<const float> ref_logits, std::size_t k) {
  std::vector<double> lp = log_softmax(ref_logits);
  k = std::min(k, lp.size());
  std::partial_sort(lp.begin(), lp.begin() + static_cast<std::ptrdiff_t>(k), lp.end(), std::greater<>());
  double mass = 0.0;
  for (std::size_t i = 0; i < k; ++i) mass += std::exp(lp[i]);
  return mass;
}

void check_engine_output(const ItemsFile& items, const EngineOutput& out, std::int64_t vocab) {
  const std::set<std::string> text(items.text_ids.begin(), items.text_ids.end());
  const std::set<std::string> retrieval(items.retrieval_ids.begin(), items.retrieval_ids.end());
  const std::string path = out.path.string();
  for (const auto& [id, item] : out.items) {
    if (!text.contains(id) && !retrieval.contains(id)) {
      throw input_error(item.source, id, "not an item of the exported items file: output for an item that was not exported");
    }
    if (text.contains(id) && item.generated) throw input_error(item.source, id, "generated_ids for a text item (it is teacher-forced)");
    if (retrieval.contains(id) && (!item.logits.empty() || !item.topk.empty())) {
      throw input_error(item.source, id, "logits for a retrieval item (it needs its generated_ids)");
    }
  }
  const std::int64_t C = items.header.at("settings").at("continuation_tokens").get<std::int64_t>();
  const auto P = static_cast<std::size_t>(items.inputs.prompt_tokens);
  std::optional<bool> topk_kind;
  for (std::size_t t = 0; t < items.text_ids.size(); ++t) {
    const std::string& id = items.text_ids[t];
    const auto it = out.items.find(id);
    if (it == out.items.end() || (it->second.logits.empty() && it->second.topk.empty())) {
      throw input_error(path, id, "missing: no logits or top-k rows for this text item");
    }
    const EngineItem& e = it->second;
    const bool is_topk = !e.topk.empty();
    if (topk_kind && *topk_kind != is_topk) {
      throw input_error(e.source, id, "{}, but other items have {}: give one kind for every text item", is_topk ? "top-k rows" : "full logits",
                        is_topk ? "full logits" : "top-k rows");
    }
    topk_kind = is_topk;
    if (e.positions != C) {
      throw input_error(e.source, id, "{} positions; the item has {} continuation tokens (one row per continuation token, row i "
                        "predicting token i)", e.positions, C);
    }
    if (!is_topk && e.vocab != vocab) throw input_error(e.source, id, "vocabulary of {} logits; the model's is {}", e.vocab, vocab);
    for (std::size_t pos = 0; pos < e.topk.size(); ++pos) {
      const std::int32_t target = items.inputs.prompts[t].tokens[P + pos];
      bool has_target = false;
      for (const TopkEntry& entry : e.topk[pos]) {
        if (entry.token >= vocab) {
          throw input_error(e.source, id, "position {}: token {} is outside the model's vocabulary of {}", pos, entry.token, vocab);
        }
        has_target |= entry.token == target;
      }
      if (!has_target) {
        throw input_error(e.source, id, "position {}: the continuation token {} is not among the log-probabilities (its "
                          "log-probability gives the perplexity; vLLM's prompt_logprobs include it)", pos, target);
      }
    }
  }
  for (const std::string& id : items.retrieval_ids) {
    const auto it = out.items.find(id);
    if (it == out.items.end() || !it->second.generated) throw input_error(path, id, "missing: no generated_ids for this retrieval item");
  }
}

EngineRow engine_row(const ItemsFile& items, const EngineOutput& out, const std::string& name) {
  const auto start = std::chrono::steady_clock::now();
  const AccuracyInputs& in = items.inputs;
  EngineRow r;
  DistributionComparison dist;
  double nll = 0.0, coverage = 0.0;
  std::int64_t predicted = 0;
  r.k_min = std::numeric_limits<std::int64_t>::max();
  for (std::size_t p = 0; p < in.prompts.size(); ++p) {
    const EngineItem& e = out.items.at(items.text_ids[p]);
    const std::vector<float>& rr = in.reference.rows[p];
    const auto V = static_cast<std::size_t>(rr.size() / static_cast<std::size_t>(e.positions));
    for (std::int64_t i = 0; i < e.positions; ++i) {
      const std::span<const float> ref(rr.data() + static_cast<std::size_t>(i) * V, V);
      const std::int32_t target = in.prompts[p].tokens[static_cast<std::size_t>(in.prompt_tokens + i)];
      if (e.topk.empty()) {
        const std::span<const float> row(e.logits.data() + static_cast<std::size_t>(i) * V, V);
        dist.add(ref, row);
        nll += token_nll(row, target);
      } else {
        const std::vector<TopkEntry>& entries = e.topk[static_cast<std::size_t>(i)];
        dist.add(compare_position_topk(ref, entries));
        for (const TopkEntry& entry : entries) {
          if (entry.token == target) nll -= entry.logprob;
        }
        coverage += reference_topk_coverage(ref, entries.size());
        r.k_min = std::min<std::int64_t>(r.k_min, static_cast<std::int64_t>(entries.size()));
        r.topk = true;
      }
      ++predicted;
    }
  }
  for (std::size_t i = 0; i < in.retrieval.size(); ++i) {
    const RetrievalCase& rc = in.retrieval[i];
    const bool ok = exact_match(*out.items.at(items.retrieval_ids[i]).generated, rc.answer);
    r.row.overall.add(ok);
    r.row.by_length[rc.item.length_bucket].add(ok);
    r.row.by_task[rc.item.task].add(ok);
  }
  r.row.name = r.topk ? fmt::format("{} [top-{} KL: a lower bound]", name, r.k_min) : name;
  r.row.dist = dist.summary();
  r.row.ppl = perplexity(nll, predicted);
  r.reference_coverage = r.topk ? coverage / static_cast<double>(predicted) : 1.0;
  if (!r.topk) r.k_min = 0;
  r.row.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace kvcheck::cli
