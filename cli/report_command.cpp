// kvcheck report: the accuracy regression report of a model and its policies (README, "Reading a
// report"). The reference runs once per (model, datasets, settings) and is cached on disk; every
// policy x budget runs through cli/accuracy_run.h, the per-step oracle over the first prompt(s).
// Outputs report.json (format "kvcheck-report", version 1), report.md and report.html under --out;
// with --baseline, exits 1 and prints what regressed (cli/report_baseline.h).
#include <algorithm>
#include <chrono>
#include <fstream>

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/accuracy_run.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/eval_files.h"
#include "cli/eval_output.h"
#include "cli/json_file.h"
#include "cli/progress.h"
#include "cli/report_baseline.h"
#include "cli/report_html.h"
#include "cli/report_reference_cache.h"
#include "optimized/kv_policy.h"
#include "optimized/step_decision.h"
#include "reference/errors.h"
#include "reference/model.h"

namespace kvcheck::cli {
namespace {

struct Mode {
  std::int64_t prompts, prompt_tokens, max_new_tokens, retrieval, oracle_prompts;
  std::vector<std::int64_t> budgets;
};
constexpr std::int64_t kUnset = -1;

Mode mode_of(const ReportArgs& a) {
  Mode m = a.quick ? Mode{2, 64, 32, 12, 1, {32, 64}} : Mode{8, 128, 64, 48, 1, {32, 64, 128}};
  if (a.prompts > 0) m.prompts = a.prompts;
  if (a.prompt_tokens > 0) m.prompt_tokens = a.prompt_tokens;
  if (a.max_new_tokens > 0) m.max_new_tokens = a.max_new_tokens;
  if (a.retrieval_items != kUnset) m.retrieval = a.retrieval_items;
  if (a.oracle_prompts != kUnset) m.oracle_prompts = a.oracle_prompts;
  if (!a.budgets.empty()) m.budgets = a.budgets;
  return m;
}

void write_text(const std::filesystem::path& file, const std::string& text) {
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw input_error(file.string(), "--out", "cannot be written");
    out << text;
  }
  std::filesystem::rename(tmp, file);
}

BaselineRow baseline_row(const nlohmann::json& r) {
  BaselineRow b;
  b.policy = r.at("policy").get<std::string>();
  b.kl_mean = r.at("kl_mean").get<double>();
  b.perplexity_ratio = r.at("perplexity_ratio").get<double>();
  if (!r.at("retrieval_accuracy").is_null()) b.retrieval_accuracy = r.at("retrieval_accuracy").get<double>();
  b.retrieval_items = r.at("retrieval_items").get<std::int64_t>();
  b.oracle_violations = r.at("oracle_violations").get<std::int64_t>();
  return b;
}

}  // namespace

void add_report(CLI::App& app, ReportArgs& args) {
  CLI::App* cmd = app.add_subcommand("report", "Accuracy regression report of every policy x budget against the reference");
  cmd->add_option("--model", args.model, "Model directory (default: the embedded model)");
  cmd->add_option("--device", args.device, "cpu or cuda")->capture_default_str();
  cmd->add_option("--policies", args.policies, "Policy names, comma-separated (default: every registered policy)")
      ->delimiter(',');
  cmd->add_option("--budgets", args.budgets, "Tokens per head for the evicting policies (default 32,64,128; --quick 32,64)")
      ->delimiter(',');
  cmd->add_option("--out", args.out, "Directory for report.json, report.md and report.html")->required();
  cmd->add_option("--baseline", args.baseline, "Compare with this baseline; exit 1 on a regression");
  cmd->add_flag("--update-baseline", args.update_baseline, "Write --baseline from this run instead of comparing");
  cmd->add_flag("--quick", args.quick, "The test gate's size: 2 prompts x (64 + 32) tokens, 12 retrieval items, budgets 32,64");
  cmd->add_option("--prompts", args.prompts, "Held-out windows (default 8; --quick 2)");
  cmd->add_option("--prompt-tokens", args.prompt_tokens, "Prompt tokens per window (default 128; --quick 64)");
  cmd->add_option("--max-new-tokens", args.max_new_tokens, "Continuation tokens per window (default 64; --quick 32)");
  cmd->add_option("--retrieval-items", args.retrieval_items, "Retrieval items (default 48; --quick 12)");
  cmd->add_option("--oracle-prompts", args.oracle_prompts, "Windows checked by the per-step oracle (default 1)");
  cmd->add_option("--cache", args.cache, "Reference cache directory (default OUT/reference-cache)");
  cmd->add_option("--heldout", args.heldout_file,
                  "Held-out text the prompts are cut from, JSONL (default: <datasets>/eval/heldout.jsonl)");
  cmd->add_option("--retrieval", args.retrieval_file, "Retrieval items, JSONL (default: <datasets>/eval/retrieval.jsonl)");
  cmd->add_option("--threads", args.threads, "CPU threads (0: every core)");
  cmd->add_flag("--quiet", args.quiet, "No progress on stderr");
}

namespace {

// Seconds since `t0`, and the peak resident set of this process so far (getrusage: the kernel's
// high-water mark, KiB on Linux), for the run line and report.json's "run".
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
std::int64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace

int run_report(const ReportArgs& args) {
  const auto started = std::chrono::steady_clock::now();
  if (args.update_baseline && args.baseline.empty()) {
    throw input_error("kvcheck report", "--update-baseline", "needs --baseline FILE to write");
  }
  const Mode mode = mode_of(args);
  // --retrieval N counted items before --retrieval FILE named them: say so rather than "12: not found".
  std::error_code ec;
  if (!args.retrieval_file.empty() && args.retrieval_file.find_first_not_of("0123456789") == std::string::npos &&
      !std::filesystem::exists(args.retrieval_file, ec)) {
    throw input_error("--retrieval", args.retrieval_file,
                      "names a retrieval file (JSONL); the number of retrieval items is --retrieval-items N");
  }
  check_eval_files(args.heldout_file, args.retrieval_file);  // a malformed line is reported before any model work
  const std::filesystem::path dir =
      args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  // Every configuration checked before anything runs (InputError naming a bad policy).
  struct Config {
    std::string spec;
    std::int64_t budget;
  };
  std::vector<Config> configs;
  for (const std::string& name : args.policies.empty() ? policy_names() : args.policies) {
    make_policy(name);
    if (!policy_spec_at_budget(name, 1)) {
      configs.push_back({name, 0});
      continue;
    }
    for (const std::int64_t b : mode.budgets) configs.push_back({*policy_spec_at_budget(name, b), b});
  }
  const std::optional<ReportBaseline> baseline =
      args.baseline.empty() || args.update_baseline ? std::nullopt : std::optional(load_report_baseline(args.baseline));

  const ReferenceModel model = ReferenceModel::load(dir);
  VerifyArgs run;
  run.model = dir.string();
  run.device = args.device;
  run.prompts = mode.prompts;
  run.prompt_tokens = mode.prompt_tokens;
  run.max_new_tokens = mode.max_new_tokens;
  run.sweep_retrieval = mode.retrieval;
  run.threads = args.threads;
  run.feed = "text";
  run.heldout_file = args.heldout_file;
  run.retrieval_file = args.retrieval_file;
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
  if (baseline && baseline->settings != settings) {
    throw input_error(args.baseline, "settings",
                      "the baseline was made with other settings or data ({}): compare like with like, or rewrite it "
                      "with --update-baseline",
                      fmt::join(settings_differences(baseline->settings, settings), "; "));
  }

  // The reference: cached by model, data and settings.
  const auto t0 = std::chrono::steady_clock::now();
  const std::filesystem::path out_dir(args.out);
  std::filesystem::create_directories(out_dir);
  const std::filesystem::path cache_dir = args.cache.empty() ? out_dir / "reference-cache" : std::filesystem::path(args.cache);
  const std::string key = file_hash_of_string(settings.dump());
  std::optional<TextReference> cached = load_cached_reference(cache_dir, key, inputs, model.config());
  const bool hit = cached.has_value();
  inputs.reference = hit ? std::move(*cached) : compute_text_reference(model, inputs, true);
  if (!hit && !store_cached_reference(cache_dir, key, inputs.reference)) {
    fmt::print(stderr, "kvcheck report: warning: the reference cache {} could not be written; the next run computes it again\n",
               cache_dir.string());
  }
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
      nlohmann::json j = accuracy_row_json(row, configs[i].spec, configs[i].budget);
      j.update({{"kl_p999", row.dist.kl_p999},
                {"kl_p95", row.dist.kl_p95},
                {"kl_p90", row.dist.kl_p90},
                {"kl_p50", row.dist.kl_p50},
                {"kl_max", row.dist.kl_max},
                {"rms_delta_p", row.dist.rms_delta_p},
                {"perplexity_ratio", row.ppl / ref_ppl},
                {"oracle_checks", row.oracle_checks},
                {"oracle_violations", row.oracle_violations},
                {"wall_s", row.wall_s}});
      if (row.stores_fp8) {
        j.update({{"fp8_saturated", row.fp8_saturated}, {"fp8_stored", row.fp8_stored}});
        if (row.fp8_saturated > 0) {
          fmt::print(stderr, "kvcheck report: warning: {}: {} of {} FP8 key/value elements saturated (beyond 448 x "
                     "their head's scale, clamped); fp8:scale=page or fp8:scale=calibrated avoid it\n",
                     row.name, row.fp8_saturated, row.fp8_stored);
        }
      }
      rows.push_back(std::move(j));
      bar.update(static_cast<std::int64_t>(i + 1), static_cast<std::int64_t>(configs.size()));
    }
  }
  // SpvLLM's four slot strategies at the middle budget, in pages of 16 tokens as its blocks: the
  // same decisions (H2O's), so the same accuracy; what differs is how the pages fill, shown as
  // fragmentation over the decode steps.
  nlohmann::json spvllm = nullptr;
  const bool has_spvllm = std::any_of(configs.begin(), configs.end(), [](const Config& c) { return c.spec.starts_with("spvllm"); });
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
  write_json_atomically(out_dir / "report.json", report, "--out");
  write_text(out_dir / "report.md", report_markdown(report));
  write_text(out_dir / "report.html", report_html(report));
  fmt::print("{}", report_markdown(report));
  fmt::print("\nreport: {}\n", (std::filesystem::absolute(out_dir) / "report.html").string());
  fmt::print("run: {:.1f} s wall, peak RSS {:.0f} MB\n", report.at("run").at("wall_s").get<double>(),
             static_cast<double>(report.at("run").at("peak_rss_bytes").get<std::int64_t>()) / 1e6);

  std::vector<BaselineRow> current;
  std::int64_t violations = 0;
  for (const nlohmann::json& r : rows) {
    current.push_back(baseline_row(r));
    violations += r.at("oracle_violations").get<std::int64_t>();
  }
  if (args.update_baseline) {
    write_json_atomically(args.baseline, make_report_baseline(settings, current, BaselineTolerances{}), "--baseline");
    fmt::print("baseline written: {}\n", args.baseline);
    return violations > 0 ? 1 : 0;
  }
  if (baseline) {
    const std::vector<Regression> regressions = compare_to_baseline(*baseline, current);
    if (!regressions.empty()) {
      fmt::print("\nREGRESSED against {} ({} finding(s)):\n{}", args.baseline, regressions.size(),
                 regression_table(regressions));
      return 1;
    }
    fmt::print("no regression against {} ({} rows)\n", args.baseline, baseline->rows.size());
  }
  if (violations > 0) {
    fmt::print("per-step oracle: {} violation(s)\n", violations);
    return 1;
  }
  return 0;
}

}  // namespace kvcheck::cli
