// kvcheck report: the accuracy regression report of a model and its policies (docs/reports.md,
// "Reading it"). The reference runs once per (model, datasets, settings) and is cached on disk; every
// policy x budget runs through cli/accuracy_run.h, the per-step oracle over the first prompt(s).
// Outputs report.json (format "kvcheck-report", version 1), report.md and report.html under --out;
// with --baseline, exits 1 and prints what regressed (cli/report_baseline.h).
#include <algorithm>
#include <chrono>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/accuracy_run.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/eval_files.h"
#include "cli/eval_output.h"
#include "cli/progress.h"
#include "cli/report_pipeline.h"
#include "cli/report_long.h"
#include "cli/report_reference_cache.h"
#include "optimized/kv_policy.h"
#include "optimized/step_decision.h"
#include "reference/errors.h"
#include "reference/model.h"

namespace kvcheck::cli {

void add_report(CLI::App& app, ReportArgs& args) {
  CLI::App* cmd = app.add_subcommand("report", "Accuracy regression report of every policy x budget against the reference");
  cmd->add_option("--model", args.model, "Model directory or GGUF file (default: the embedded model)");
  cmd->add_option("--device", args.device, "cpu, cuda or cuda-resident")->capture_default_str();
  cmd->add_option("--policies", args.policies,
                  "Policy names or specs, comma-separated; a spec keeps its own commas, as in kv-bits:k=4,v=8 "
                  "(default: every registered policy)");
  cmd->add_option("--budgets", args.budgets, "Tokens per head for the evicting policies (default 32,64,128; --quick 32,64)")
      ->delimiter(',');
  cmd->add_option("--out", args.out, "Directory for report.json, report.md and report.html")->required();
  cmd->add_option("--baseline", args.baseline, "Compare with this baseline; exit 1 on a regression");
  cmd->add_flag("--update-baseline", args.update_baseline, "Write --baseline from this run instead of comparing");
  cmd->add_flag("--quick", args.quick, "The test gate's size: 2 prompts x (64 + 32) tokens, 12 retrieval items, budgets 32,64");
  cmd->add_flag("--long", args.long_context,
                "Long context: windows of 1K-8K tokens (KL, top-1 and perplexity by position), retrieval by length "
                "and depth in the chat template, budgets as fractions of the context (--quick: 1K and 2K, 16 tokens decoded, "
                "3 depths, 1/8, twelve policies)");
  cmd->add_option("--lengths", args.lengths, "--long: window and item lengths in tokens (default 1024,2048,4096,8192; --quick 1024,2048)")
      ->delimiter(',');
  cmd->add_option("--depths", args.depths, "--long: retrieval depths in percent (default 0,10,...,100; --quick 0,50,100)")
      ->delimiter(',');
  cmd->add_option("--fractions", args.fractions,
                  "--long: budgets of the evicting and selecting policies as fractions of the context (default 1/8,1/4,1/2; --quick 1/8)")
      ->delimiter(',');
  cmd->add_option("--prompts", args.prompts, "Held-out windows (default 8; --quick 2; --long: per length, default 2, --quick 1)");
  cmd->add_option("--prompt-tokens", args.prompt_tokens, "Prompt tokens per window (default 128; --quick 64)");
  cmd->add_option("--max-new-tokens", args.max_new_tokens,
                  "Continuation tokens per window (default 64; --quick 32; --long: the last tokens of each window, default 64, --quick 16)");
  cmd->add_option("--retrieval-items", args.retrieval_items, "Retrieval items (default 48; --quick 12; --long: per length and depth, default 1)");
  cmd->add_option("--oracle-prompts", args.oracle_prompts, "Windows checked by the per-step oracle (default 1; --long: per length, their first 8 decode steps)");
  cmd->add_option("--cache", args.cache, "Reference cache directory (default OUT/reference-cache)");
  cmd->add_option("--heldout", args.heldout_file,
                  "Held-out text the prompts are cut from, JSONL (default: <datasets>/eval/heldout.jsonl)");
  cmd->add_option("--retrieval", args.retrieval_file, "Retrieval items, JSONL (default: <datasets>/eval/retrieval.jsonl)");
  cmd->add_option("--threads", args.threads, "CPU threads (0: every core)");
  cmd->add_flag("--quiet", args.quiet, "No progress on stderr");
  cmd->add_option("--render", args.render,
                  "Only rewrite report.md and report.html under --out from this report.json (no model run, no gate)");
}

int run_report(const ReportArgs& args) {
  const auto started = std::chrono::steady_clock::now();
  if (!args.render.empty()) {
    if (!args.baseline.empty()) throw input_error("kvcheck report", "--render", "renders a report.json; it takes no --baseline");
    return render_report(args.render, args.out);
  }
  if (args.long_context) return run_long_report(args);
  for (const auto& [flag, set] : {std::pair{"--lengths", !args.lengths.empty()}, std::pair{"--depths", !args.depths.empty()},
                                  std::pair{"--fractions", !args.fractions.empty()}}) {
    if (set) throw input_error("kvcheck report", flag, "belongs to --long");
  }
  const std::optional<ReportBaseline> baseline = report_baseline(args);
  const ReportMode mode = report_mode(args);
  check_retrieval_flag(args.retrieval_file);
  check_eval_files(args.heldout_file, args.retrieval_file);  // a malformed line is reported before any model work
  const std::filesystem::path dir = report_model_dir(args.model);
  // Every configuration checked before anything runs (InputError naming a bad policy).
  const std::vector<PolicyConfig> configs = report_configs(args.policies.empty() ? policy_names() : args.policies, mode.budgets);

  const ReferenceModel model = ReferenceModel::load(dir);
  const VerifyArgs run = report_run_args(args, mode, dir);
  AccuracyInputs inputs = prepare_accuracy_inputs(model, dir, run);
  if (inputs.origin.starts_with("random ids")) {
    fmt::print(stderr,
               "kvcheck report: warning: {} has no tokenizer (tokenizer.json or tokenizer.model): the prompts are "
               "seeded random token ids (seed {}), not held-out text, and the retrieval items are skipped\n",
               dir.string(), run.seed);
  }

  const std::filesystem::path heldout = heldout_path(args.heldout_file);
  const std::filesystem::path retrieval = retrieval_path(args.retrieval_file);
  const nlohmann::json settings = {{"prompts", mode.prompts},
                                   {"prompt_tokens", mode.prompt_tokens},
                                   {"continuation_tokens", mode.max_new_tokens},
                                   {"retrieval_items", inputs.retrieval.size()},
                                   {"budgets", mode.budgets},
                                   {"oracle_prompts", mode.oracle_prompts},
                                   {"device", args.device},
                                   {"model_hash", model_hash(dir)},
                                   {"heldout_hash", file_hash(heldout)},
                                   {"retrieval_hash", file_hash(retrieval)}};
  check_baseline_settings(baseline, args.baseline, settings);

  // The reference: cached by model, data and settings.
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path out_dir(args.out);
  std::filesystem::create_directories(out_dir);
  const std::filesystem::path cache_dir = args.cache.empty() ? out_dir / "reference-cache" : std::filesystem::path(args.cache);
  const std::string key = file_hash_of_string(settings.dump());
  const bool hit = load_or_compute_reference(model, inputs, cache_dir, key, "kvcheck report");
  const double ref_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double ref_ppl = perplexity(inputs.reference.nll, inputs.reference.predicted);
  if (!args.quiet) {
    fmt::print(stderr, "kvcheck report: reference {} ({:.1f} s), {} configurations\n",
               hit ? "from the cache" : "computed", ref_s, configs.size());
  }

  nlohmann::json rows = nlohmann::json::array();
  {
    ProgressBar bar("report", "configurations", args.quiet);
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const AccuracyRow row = measure_accuracy(model, inputs, run, configs[i].spec, mode.oracle_prompts);
      rows.push_back(report_row_json(row, configs[i].spec, configs[i].budget, ref_ppl));
      bar.update(static_cast<std::int64_t>(i + 1), static_cast<std::int64_t>(configs.size()));
    }
  }
  // SpvLLM's four slot strategies at the middle budget, in pages of 16 tokens as its blocks: the
  // same decisions (H2O's), so the same accuracy; what differs is how the pages fill, shown as
  // fragmentation over the decode steps.
  nlohmann::json spvllm = nullptr;
  const bool has_spvllm = std::any_of(configs.begin(), configs.end(), [](const PolicyConfig& c) { return c.spec.starts_with("spvllm"); });
  if (has_spvllm) {
    const std::int64_t budget = mode.budgets[mode.budgets.size() / 2];
    VerifyArgs blocks = run;
    blocks.page_bytes = sixteen_token_page_bytes(model.config());
    nlohmann::json strategies = nlohmann::json::array();
    for (const SlotStrategy st : kAllSlotStrategies) {
      const std::string spec = fmt::format("{},strategy={}", *policy_spec_at_budget("spvllm", budget), slot_strategy_name(st));
      const AccuracyRow row = measure_accuracy(model, inputs, blocks, spec, 0, false);
      strategies.push_back({{"strategy", slot_strategy_name(st)},
                            {"spec", spec},
                            {"kl_mean", row.dist.kl_mean},
                            {"fragmentation_by_step", row.fragmentation_by_step}});
    }
    spvllm = {{"budget", budget}, {"page_bytes", blocks.page_bytes}, {"strategies", strategies}};
  }
  // The reference's attention over the continuation: where there is something to evict or store
  // in fewer bits (oracles/attention_structure.h).
  nlohmann::json attention = nlohmann::json::array();
  for (const HeadAttentionStats& h : inputs.reference.attention) attention.push_back(head_attention_json(h));
  const nlohmann::json report = {{"format", "kvcheck-report"},
                                 {"version", 1},
                                 {"command", args.command_line},
                                 {"engine", {{"version", version_string()}, {"device", args.device}}},
                                 {"model", {{"path", dir.string()}, {"hash", settings.at("model_hash")}}},
                                 {"datasets", {{"heldout", heldout.string()}, {"heldout_hash", settings.at("heldout_hash")},
                                               {"retrieval", retrieval.string()}, {"retrieval_hash", settings.at("retrieval_hash")}}},
                                 {"settings", settings},
                                 {"reference", {{"perplexity", ref_ppl}, {"cached", hit}, {"wall_s", ref_s}, {"prompt_source", inputs.origin},
                                                {"attention", attention}}},
                                 {"rows", rows},
                                 {"spvllm_strategies", spvllm},
                                 {"run", {{"wall_s", seconds_since(started)}, {"peak_rss_bytes", peak_rss_bytes()}}}};
  ReportGate gate{out_dir, args.baseline, args.update_baseline, baseline};
  return finish_report(report, gate);
}

}  // namespace kvcheck::cli
