// kvcheck verify --sweep: the accuracy of every policy at several budgets on the embedded model
// (or --model), measured against the reference in one run:
//
//   text       --prompts windows of the held-out text, each --prompt-tokens of prompt and
//              --max-new-tokens of continuation fed to the engine one decode step at a time:
//              KL(P_ref || P_engine) mean and standard error, top-1 agreement, and the engine's
//              perplexity of the continuation (the reference's alongside);
//   bytes      at each prompt's last decode step, the KV bytes the cache holds for it (every
//              live token of every head at its tier's bytes per token, metadata included),
//              relative to full-fp16 holding the whole context; and the KV bytes that step's
//              attention read (kv_bytes_read_vs_fp16: the held bytes, except under Quest, which
//              reads its chosen pages and every page's key range);
//   retrieval  --sweep-retrieval items of the retrieval set (spread over tasks and lengths),
//              greedy exact match as kvcheck eval scores it, overall and per length bucket.
// The held-out text and the retrieval items are --heldout and --retrieval (default: the
// datasets' own); the JSON's "datasets" names the files used and their hashes.
//
// Rows: each policy that keeps every token once, each evicting policy at each --sweep-budgets
// value (tokens per head, policy_spec_at_budget), then each --sweep-specs spec as given. Two
// kinds of row follow the row they derive from:
//   leankv-static  after every dynamic leankv row: the same tiers and window in static mode
//                  (optimized/leankv_policy.h) with static_high and static_low the dynamic run's
//                  mean high tokens per head minus the window and mean low tokens per head (at
//                  the text prompts' last step, rounded), so both hold the same bytes up to
//                  rounding on the text; the row carries the dynamic row's bytes too;
//   xkv averaged   with --xkv-calibrate N, after every xkv budget row: XKV's averaged allocation
//                  for that spec from N held-out windows after the evaluation ones
//                  (cli/xkv_calibration.h), as a fixed `layers=` spec;
//   duo calibrated with --duo-calibrate N, after every duo budget row: the same sinks and window
//                  with the retrieval heads calibrated on N held-out retrieval items beyond the
//                  evaluated ones (cli/duo_calibration.h, ranked by --duo-rank), as a `heads=` spec.
// Every row reports its mean high and low tokens per head at the text prompts' last step.
// JSON: format "kvcheck-sweep", version 1.
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/accuracy_run.h"
#include "cli/commands.h"
#include "cli/duo_calibration.h"
#include "cli/engine_options.h"
#include "cli/eval_files.h"
#include "cli/json_file.h"
#include "cli/verify_prompts.h"
#include "cli/xkv_calibration.h"
#include "oracles/accuracy_metrics.h"
#include "oracles/eval_data.h"
#include "optimized/duo_policy.h"
#include "optimized/engine.h"
#include "optimized/leankv_policy.h"
#include "optimized/xkv_policy.h"
#include "reference/errors.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {
namespace {

struct Config {
  std::string spec;
  std::int64_t budget = 0;  // 0: none
  bool xkv_budget_row = false;  // an xkv spec at a budget: --xkv-calibrate adds its averaged row
  bool duo_budget_row = false;  // a duo spec at a budget: --duo-calibrate adds its calibrated row
};

}  // namespace

int run_verify_sweep(const VerifyArgs& args) {
  const std::filesystem::path dir =
      args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  const ReferenceModel model = ReferenceModel::load(dir);
  // The configurations, checked (InputError naming an unknown policy or a bad spec) before any work.
  std::vector<Config> configs;
  const std::vector<std::int64_t>& budgets = args.sweep_budgets;
  std::vector<std::string> names;
  for (const std::string& list : args.sweep_policies) {
    for (std::string& name : split_policy_list(list)) names.push_back(std::move(name));
  }
  if (args.sweep_policies.empty()) names = policy_names();
  for (const std::string& name : names) {
    if (!policy_spec_at_budget(name, 1)) {
      configs.push_back({name, 0});
      continue;
    }
    for (std::int64_t b : budgets) {
      const std::string spec = *policy_spec_at_budget(name, b);
      const bool xkv = xkv_params_of(*make_policy(spec)).has_value();
      if (xkv && args.xkv_calibrate > 0 && args.prompt_tokens < b) {
        throw input_error("--xkv-calibrate", "--sweep-budgets",
                          "budget {} exceeds --prompt-tokens {}: the sampled requests cannot take its total", b,
                          args.prompt_tokens);
      }
      configs.push_back({spec, b, xkv, duo_params_of(*make_policy(spec)).has_value()});
    }
  }
  for (const std::string& spec : args.sweep_specs) {
    make_policy(spec);  // InputError naming a bad spec before anything runs
    configs.push_back({spec, 0});
  }

  // The duo calibrations first: quick, and their InputErrors (no tokenizer, too few items) come
  // before any row runs.
  std::map<std::string, DuoCalibration> duo_calibrations;
  if (args.duo_calibrate > 0) {
    const DuoRank rank = duo_rank(args.duo_rank);
    for (const Config& config : configs) {
      if (config.duo_budget_row) {
        duo_calibrations.emplace(config.spec, calibrate_duo(model, dir, args, config.spec, args.duo_calibrate, rank));
      }
    }
  }

  AccuracyInputs inputs = prepare_accuracy_inputs(model, dir, args);
  inputs.reference = compute_text_reference(model, inputs);
  const std::vector<Prompt>& prompts = inputs.prompts;
  const std::vector<RetrievalCase>& retrieval = inputs.retrieval;
  const TextReference& ref = inputs.reference;
  const std::string& origin = inputs.origin;
  const std::int64_t P = args.prompt_tokens;

  std::size_t derived = 0;  // leankv-static, xkv averaged and duo calibrated rows
  for (const Config& config : configs) {
    const std::optional<LeanKvParams> lean = leankv_params_of(*make_policy(config.spec));
    derived += (lean && !lean->is_static() ? 1 : 0) + (config.xkv_budget_row && args.xkv_calibrate > 0 ? 1 : 0) +
               static_cast<std::size_t>(duo_calibrations.count(config.spec));
  }
  fmt::print("verify --sweep: {} configurations (+ {} derived); {} prompts x ({} + {}) tokens of {}; {} retrieval "
             "items\n",
             configs.size(), derived, prompts.size(), P, args.max_new_tokens, origin, retrieval.size());
  fmt::print("{:<44} {:>7} {:>10} {:>9} {:>7} {:>8} {:>9}\n", "policy", "bytes", "KL mean", "+-se", "top-1", "ppl",
             "retrieval");
  nlohmann::json rows = nlohmann::json::array();
  auto measure = [&](const std::string& spec) { return measure_accuracy(model, inputs, args, spec); };
  auto emit = [&](const AccuracyRow& row, const std::string& spec, std::int64_t budget, const nlohmann::json& extra) {
    fmt::print("{:<44} {:>7.3f} {:>10.3e} {:>9.1e} {:>7.4f} {:>8.2f} {:>9}\n", row.name, row.bytes_ratio,
               row.dist.kl_mean, row.dist.kl_stderr, row.dist.top1_agreement, row.ppl,
               row.overall.total ? fmt::format("{:.3f}", row.overall.accuracy()) : std::string("-"));
    nlohmann::json j = accuracy_row_json(row, spec, budget);
    j.update(extra);
    rows.push_back(j);
  };
  for (const Config& config : configs) {
    const AccuracyRow row = measure(config.spec);
    emit(row, config.spec, config.budget, nlohmann::json::object());
    const std::optional<LeanKvParams> lean = leankv_params_of(*make_policy(config.spec));
    if (lean && !lean->is_static()) {
      // Equal static per-head budgets holding the dynamic run's mean tokens per head.
      LeanKvParams fixed = *lean;
      fixed.static_high = std::max<std::int64_t>(0, std::llround(row.high_per_head) - lean->window);
      fixed.static_low = std::max<std::int64_t>(0, std::llround(row.low_per_head));
      const std::string spec = make_leankv_policy(fixed)->name();
      const AccuracyRow st = measure(spec);
      emit(st, spec, config.budget,
           {{"static_of", row.name}, {"dynamic_kv_bytes_vs_fp16", row.bytes_ratio}});
    }
    if (config.xkv_budget_row && args.xkv_calibrate > 0) {
      const XkvCalibration cal = calibrate_xkv(model, dir, args, config.spec);
      const AccuracyRow av = measure(cal.spec);
      emit(av, cal.spec, config.budget,
           {{"averaged_from", cal.from_spec}, {"calibration_prompts", cal.sources.size()}, {"layers", cal.layers}});
    }
    if (const auto cal = duo_calibrations.find(config.spec); cal != duo_calibrations.end()) {
      const AccuracyRow calibrated = measure(cal->second.spec);
      emit(calibrated, cal->second.spec, config.budget,
           {{"calibrated_from", cal->second.from_spec},
            {"calibration_items", cal->second.items.size()},
            {"rank", args.duo_rank},
            {"heads", cal->second.heads}});
    }
  }
  const double ref_ppl = perplexity(ref.nll, ref.predicted);
  fmt::print("reference perplexity of the same continuations: {:.2f}\n", ref_ppl);
  if (!args.json.empty()) {
    write_json_atomically(args.json,
                          {{"format", "kvcheck-sweep"},
                           {"version", 1},
                           {"model", dir.string()},
                           {"prompt_source", origin},
                           {"datasets", datasets_json(inputs.heldout_file, inputs.retrieval_file)},
                           {"prompts", prompts.size()},
                           {"prompt_tokens", P},
                           {"continuation_tokens", args.max_new_tokens},
                           {"retrieval_items", retrieval.size()},
                           {"budgets", budgets},
                           {"reference_perplexity", ref_ppl},
                           {"rows", rows}},
                          "--json");
  }
  return 0;
}

}  // namespace kvcheck::cli
