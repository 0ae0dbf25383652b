// kvcheck compare's engine rows: another engine's outputs (cli/engine_output.h) on the exported
// items (cli/items_file.h), held to the reference with the report's metrics
// (oracles/accuracy_metrics.h): KL(P_ref || P_engine) statistics, top-1 agreement, RMS Δp and the
// engine's perplexity of the continuations; greedy exact match on the retrieval items, overall, by
// length and by task.
//
// Top-k rows: KL is taken over the engine's k tokens and one bucket for the rest of the mass,
//   KL_k = sum_{i in S} p_i log(p_i / q_i) + p_rest log(p_rest / q_rest),
// p_rest = 1 - sum_S p_i, q_rest = 1 - sum_S q_i (no bucket when S is the whole vocabulary). It is
// KL between the two distributions coarse-grained to S + {rest}, so KL_k <= KL (data-processing
// inequality), equal when k = vocab. The engine's top token is its largest entry; the Δp of a
// reference top token the engine does not list counts its probability as 0. The reference's own
// top-k coverage (the mass of its k most likely tokens) is reported beside it.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "cli/accuracy_run.h"
#include "cli/engine_output.h"
#include "cli/items_file.h"
#include "oracles/accuracy_metrics.h"

namespace kvcheck::cli {

// One position of a top-k row against the reference's logits (see above).
PositionComparison compare_position_topk(std::span<const float> ref_logits, std::span<const TopkEntry> entries);
// The reference's probability mass on its k most likely tokens.
double reference_topk_coverage(std::span<const float> ref_logits, std::size_t k);

// Checks that `out` answers exactly the items: every output id exported, every text item with
// logits or top-k rows (one kind for all of them) of one row per continuation token and the model's
// vocabulary (top-k: token ids inside it, the continuation token among the entries), every
// retrieval item with generated ids, no generated ids for a text item. InputError naming the
// file, the item and the position otherwise.
void check_engine_output(const ItemsFile& items, const EngineOutput& out, std::int64_t vocab);

struct EngineRow {
  AccuracyRow row;
  bool topk = false;
  std::int64_t k_min = 0;              // fewest entries at a position (top-k rows)
  double reference_coverage = 0.0;     // mean reference_topk_coverage at the entries' k
};

// The row of a checked output (check_engine_output) against items.inputs.reference.
EngineRow engine_row(const ItemsFile& items, const EngineOutput& out, const std::string& name);

}  // namespace kvcheck::cli
