// What `kvcheck eval` found, printed for a person and written as JSON for reports.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "oracles/attention_structure.h"
#include "oracles/eval_perplexity.h"
#include "oracles/eval_retrieval.h"

namespace kvcheck::cli {

// Heads listed in the attention summary.
inline constexpr double kConcentratedFrac95 = 0.2;  // frac_for_95 below: few tokens hold 95%
inline constexpr double kSinkFirstTokenMass = 0.5;  // first_token_mass above: an attention sink
inline constexpr std::int64_t kAttentionQueries = 32;  // last query positions per prompt

struct AttentionOutcome {
  std::string file;
  std::int64_t length_bucket = 0;
  std::int64_t prompts = 0;
  std::int64_t query_positions = kAttentionQueries;
  std::vector<HeadAttentionStats> heads;
};

struct EvalOutcome {
  std::string model;
  std::vector<std::string> tasks;  // "ppl", "retrieval", "attention", in that order
  std::optional<std::int64_t> limit;
  std::string heldout_file;
  std::optional<PerplexityResult> ppl;
  std::string retrieval_file;
  std::optional<RetrievalResult> retrieval;
  std::optional<AttentionOutcome> attention;
};

// The human-readable summary (stdout).
std::string format_eval(const EvalOutcome& outcome);
// One head's attention statistics: layer, kv_head, samples and the four means (eval and report).
nlohmann::json head_attention_json(const HeadAttentionStats& h);
// The JSON document (eval_command.cpp and docs/models.md, "Evaluating a model", describe its keys).
nlohmann::json eval_json(const EvalOutcome& outcome);

}  // namespace kvcheck::cli
