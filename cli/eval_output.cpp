#include "cli/eval_output.h"

#include <fmt/format.h>

#include "cli/commands.h"

namespace kvcheck::cli {

namespace {

using nlohmann::json;

std::string accuracy_text(const AccuracyCounter& a) {
  return fmt::format("{:.4f} ({}/{})", a.accuracy(), a.correct, a.total);
}

std::string head_name(const HeadAttentionStats& h) { return fmt::format("L{}H{}", h.layer, h.kv_head); }

template <typename Pred>
std::vector<const HeadAttentionStats*> heads_where(const AttentionOutcome& a, Pred pred) {
  std::vector<const HeadAttentionStats*> out;
  for (const HeadAttentionStats& h : a.heads) {
    if (pred(h)) out.push_back(&h);
  }
  return out;
}

bool concentrated(const HeadAttentionStats& h) { return h.frac_for_95 < kConcentratedFrac95; }
bool sink(const HeadAttentionStats& h) { return h.first_token_mass > kSinkFirstTokenMass; }

std::string head_list(const std::vector<const HeadAttentionStats*>& heads) {
  if (heads.empty()) return "none";
  std::string s;
  for (const HeadAttentionStats* h : heads) s += (s.empty() ? "" : " ") + head_name(*h);
  return s;
}

template <typename Key>
json accuracy_map(const std::map<Key, AccuracyCounter>& groups) {
  json j = json::object();
  for (const auto& [key, a] : groups) j[fmt::format("{}", key)] = a.accuracy();
  return j;
}

template <typename Key>
json count_map(const std::map<Key, AccuracyCounter>& groups) {
  json j = json::object();
  for (const auto& [key, a] : groups) {
    j[fmt::format("{}", key)] = {{"correct", a.correct}, {"total", a.total}, {"accuracy", a.accuracy()}};
  }
  return j;
}

json head_refs(const std::vector<const HeadAttentionStats*>& heads) {
  json j = json::array();
  for (const HeadAttentionStats* h : heads) j.push_back({{"layer", h->layer}, {"kv_head", h->kv_head}});
  return j;
}

}  // namespace

std::string format_eval(const EvalOutcome& o) {
  std::string s = fmt::format("model: {}\n", o.model);
  if (o.ppl) {
    const PerplexityResult& p = *o.ppl;
    s += fmt::format("\nperplexity: {} ({} documents, {} windows of at most {} tokens overlapping by 1, {} predicted tokens)\n",
                     o.heldout_file, p.documents, p.windows, p.context, p.predicted_tokens);
    s += fmt::format("  perplexity          {:.4f}\n", p.perplexity);
    s += fmt::format("  unigram perplexity  {:.4f}   (same tokens, their own unigram frequencies)\n",
                     p.unigram_perplexity);
    s += fmt::format("  ratio               {:.4f}   (perplexity / unigram perplexity; below 1: the model uses context)\n",
                     p.perplexity / p.unigram_perplexity);
  }
  if (o.retrieval) {
    const RetrievalResult& r = *o.retrieval;
    s += fmt::format("\nretrieval: {} ({} items, exact match of the greedy continuation)\n", o.retrieval_file,
                     r.items.size());
    s += fmt::format("  accuracy            {}\n", accuracy_text(r.overall));
    s += "  by length_bucket\n";
    for (const auto& [bucket, a] : r.by_length) s += fmt::format("    {:<16}  {}\n", bucket, accuracy_text(a));
    s += "  by task\n";
    for (const auto& [task, a] : r.by_task) s += fmt::format("    {:<16}  {}\n", task, accuracy_text(a));
  }
  if (o.attention) {
    const AttentionOutcome& a = *o.attention;
    s += fmt::format("\nattention structure: {} prompts of length_bucket {} from {}, last {} query positions each\n",
                     a.prompts, a.length_bucket, a.file, a.query_positions);
    s += fmt::format("  {:>5} {:>7} {:>16} {:>11} {:>13} {:>11}\n", "layer", "kv_head", "first_token_mass",
                     "top10_share", "tokens_for_95", "frac_for_95");
    for (const HeadAttentionStats& h : a.heads) {
      s += fmt::format("  {:>5} {:>7} {:>16.4f} {:>11.4f} {:>13.1f} {:>11.4f}\n", h.layer, h.kv_head,
                       h.first_token_mass, h.top10_share, h.tokens_for_95, h.frac_for_95);
    }
    s += fmt::format("  heads with frac_for_95 < {}: {}\n", kConcentratedFrac95, head_list(heads_where(a, concentrated)));
    s += fmt::format("  heads with first_token_mass > {}: {}\n", kSinkFirstTokenMass, head_list(heads_where(a, sink)));
  }
  return s;
}

json head_attention_json(const HeadAttentionStats& h) {
  return {{"layer", h.layer},
          {"kv_head", h.kv_head},
          {"samples", h.samples},
          {"first_token_mass", h.first_token_mass},
          {"top10_share", h.top10_share},
          {"tokens_for_95", h.tokens_for_95},
          {"frac_for_95", h.frac_for_95}};
}

json eval_json(const EvalOutcome& o) {
  json j;
  j["format"] = "kvcheck-eval";
  j["version"] = 1;
  j["kvcheck_version"] = version_string();
  j["model"] = o.model;
  j["tasks"] = o.tasks;
  j["limit"] = o.limit ? json(*o.limit) : json(nullptr);

  // Headline numbers: always present, null when their task did not run.
  j["perplexity"] = o.ppl ? json(o.ppl->perplexity) : json(nullptr);
  j["unigram_perplexity"] = o.ppl ? json(o.ppl->unigram_perplexity) : json(nullptr);
  j["perplexity_ratio"] = o.ppl ? json(o.ppl->perplexity / o.ppl->unigram_perplexity) : json(nullptr);
  j["retrieval_accuracy"] = o.retrieval ? json(o.retrieval->overall.accuracy()) : json(nullptr);
  j["retrieval_accuracy_by_length"] = o.retrieval ? accuracy_map(o.retrieval->by_length) : json(nullptr);
  j["retrieval_accuracy_by_task"] = o.retrieval ? accuracy_map(o.retrieval->by_task) : json(nullptr);

  if (o.ppl) {
    const PerplexityResult& p = *o.ppl;
    j["ppl"] = {{"heldout", o.heldout_file},
                {"documents", p.documents},
                {"windows", p.windows},
                {"context", p.context},
                {"window_overlap", 1},
                {"predicted_tokens", p.predicted_tokens},
                {"nll_sum", p.nll_sum}};
  } else {
    j["ppl"] = nullptr;
  }
  if (o.retrieval) {
    const RetrievalResult& r = *o.retrieval;
    json items = json::array();
    for (const RetrievalItemResult& it : r.items) {
      items.push_back({{"id", it.id},
                       {"task", it.task},
                       {"length_bucket", it.length_bucket},
                       {"prompt_tokens", it.prompt_tokens},
                       {"answer_tokens", it.answer_ids.size()},
                       {"correct", it.correct},
                       {"generated", it.generated_text},
                       {"generated_ids", it.generated},
                       {"answer_ids", it.answer_ids}});
    }
    j["retrieval"] = {{"file", o.retrieval_file},
                      {"items", r.overall.total},
                      {"correct", r.overall.correct},
                      {"by_length", count_map(r.by_length)},
                      {"by_task", count_map(r.by_task)},
                      {"results", items}};
  } else {
    j["retrieval"] = nullptr;
  }
  if (o.attention) {
    const AttentionOutcome& a = *o.attention;
    json heads = json::array();
    for (const HeadAttentionStats& h : a.heads) heads.push_back(head_attention_json(h));
    j["attention"] = {{"file", a.file},
                      {"length_bucket", a.length_bucket},
                      {"prompts", a.prompts},
                      {"query_positions", a.query_positions},
                      {"heads", heads},
                      {"concentrated_heads", head_refs(heads_where(a, concentrated))},
                      {"concentrated_frac_for_95_below", kConcentratedFrac95},
                      {"sink_heads", head_refs(heads_where(a, sink))},
                      {"sink_first_token_mass_above", kSinkFirstTokenMass}};
  } else {
    j["attention"] = nullptr;
  }
  return j;
}

}  // namespace kvcheck::cli
