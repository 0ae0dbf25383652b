// kvcheck report --long: accuracy over long contexts (docs/reports.md, "The long report").
//
//   text       held-out windows of each length L (1K, 2K, 4K, 8K by default): the first L - C tokens
//              prefilled, the last C fed one decode step at a time, so the measured positions of a
//              window of length L lie in the position bin that ends at L; KL, top-1 agreement and
//              the perplexity ratio per bin;
//   retrieval  items of each length and depth (datasets/eval/long-retrieval.jsonl), rendered in the
//              model's chat template with the answer's prefix opening the assistant's turn; exact
//              match against the answer and agreement with the full-precision engine's own greedy
//              answer, as a length x depth grid;
//   policies   every configuration at budgets that are fractions of the context (1/8, 1/4, 1/2 of
//              L for an evicting or selecting policy), each on its own engine per length;
//   oracle     the per-step oracle over the first window(s) of every length.
// The reference's rows are cached per window on disk (key: model, window tokens, reference code
// version), so a second run, or a run of other policies, does not recompute them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"

namespace kvcheck::cli {

// A budget as a fraction of the context: num / den of the window's length, in tokens per head.
struct BudgetFraction {
  std::int64_t num = 1, den = 1;
  std::int64_t of(std::int64_t length) const { return length * num / den; }
  std::string text() const;  // "1/8"
};
// "1/8" -> {1, 8}. InputError naming the flag unless 0 < num <= den.
BudgetFraction parse_budget_fraction(const std::string& text);

struct LongMode {
  std::vector<std::int64_t> lengths;   // window and item lengths in tokens, ascending
  std::int64_t windows = 1;            // text windows per length
  std::int64_t continuation = 64;      // decode steps per window: the measured positions
  std::vector<std::int64_t> depths;    // retrieval depths, percent of the context
  std::int64_t cell_items = 1;         // retrieval items per (length, depth) cell
  std::vector<BudgetFraction> fractions;
  std::int64_t oracle_windows = 1;     // per length: windows run again under the per-step oracle
  std::int64_t oracle_steps = 8;       // their first decode steps checked (0: every step)
};
// --long's sizes (--quick: the gate's short report), each overridden by its flag.
LongMode long_mode(const ReportArgs& args);

// A configuration of the long report: a policy without a budget (fraction empty) or a budgeted
// policy at a fraction of the context; `name` is the row's name in report.json (SPEC@1/8 for a
// budgeted one).
struct LongConfig {
  std::string name, spec;
  std::optional<BudgetFraction> fraction;
};
// Each policy (name or spec) once, or at every fraction when it takes a budget. InputError naming a
// bad policy before anything runs.
std::vector<LongConfig> long_configs(const std::vector<std::string>& policies, const std::vector<BudgetFraction>& fractions);
// The default policies of --long: every registered policy and the variants the papers' claims
// compare (keys vs values bits at equal bytes, rotation, KIVI-2 vs per-token INT2, calibrated FP8);
// of --long --quick (the gate's size): twelve, one per kind of cache (formats, mixed, residual,
// evicting, selecting). One shared prefill per prompt serves every configuration.
std::vector<std::string> long_default_policies(bool quick);

int run_long_report(const ReportArgs& args);

}  // namespace kvcheck::cli
