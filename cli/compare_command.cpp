// kvcheck compare: other engines' outputs on an items file of kvcheck export, held to the reference
// with exactly the report's metrics, files and gate (docs/reports.md, "Checking another engine"). The
// reference runs through the report's reference cache; each --engine-output becomes a row named
// by its --name beside any kvcheck --policies run on the same items; report.json / report.md /
// report.html are written under --out, and --baseline gates them (exit 1 with the table).
// --write-engine-output PATH --policy SPEC writes kvcheck's own engine's outputs in the engine
// output format instead (the consistency check against report, and a worked example).
#include <chrono>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/accuracy_run.h"
#include "cli/commands.h"
#include "cli/engine_compare.h"
#include "cli/engine_output_writer.h"
#include "cli/eval_output.h"
#include "cli/items_file.h"
#include "cli/progress.h"
#include "cli/report_pipeline.h"
#include "cli/report_reference_cache.h"
#include "reference/errors.h"
#include "reference/model.h"

namespace kvcheck::cli {
namespace {

// An engine row's report.json object: report_row_json's fields (KV bytes and memory: null or
// absent, the engine's cache is not seen) and the engine output's path, the kind of KL and k.
nlohmann::json engine_row_json(const EngineRow& r, const std::string& path, double reference_ppl) {
  nlohmann::json j = report_row_json(r.row, "engine output " + path, 0, reference_ppl);
  for (const char* key : {"kv_bytes_vs_fp16", "kv_bytes_read_vs_fp16", "high_tokens_per_head", "low_tokens_per_head"}) j[key] = nullptr;
  for (const char* key : {"tokens_per_layer", "bytes_vs_fp16_per_head", "fragmentation_by_step"}) j.erase(key);
  j.update({{"engine_output", path},
            {"kl_kind", r.topk ? "top-k lower bound" : "full"},
            {"top_k", r.topk ? nlohmann::json(r.k_min) : nlohmann::json(nullptr)},
            {"reference_topk_coverage", r.topk ? nlohmann::json(r.reference_coverage) : nlohmann::json(nullptr)}});
  return j;
}

void check_flags(const CompareArgs& a) {
  if (a.update_baseline && a.baseline.empty()) throw input_error("kvcheck compare", "--update-baseline", "needs --baseline FILE to write");
  if (!a.write_engine_output.empty()) {
    if (a.policy.empty()) throw input_error("kvcheck compare", "--write-engine-output", "needs --policy SPEC (kvcheck's engine to run)");
    if (!a.engine_outputs.empty()) throw input_error("kvcheck compare", "--write-engine-output", "excludes --engine-output");
    return;
  }
  if (a.top_k != 0) throw input_error("kvcheck compare", "--top-k", "only with --write-engine-output");
  if (!a.policy.empty()) throw input_error("kvcheck compare", "--policy", "only with --write-engine-output (rows of kvcheck policies: --policies)");
  if (a.out.empty()) throw input_error("kvcheck compare", "--out", "required (the directory of report.json, report.md, report.html)");
  if (a.engine_outputs.size() != a.names.size()) {
    throw input_error("kvcheck compare", "--name", "{} --engine-output and {} --name: give one name per engine output",
                      a.engine_outputs.size(), a.names.size());
  }
  if (a.engine_outputs.empty() && a.policies.empty()) {
    throw input_error("kvcheck compare", "--engine-output", "nothing to compare: give --engine-output PATH --name NAME (or --policies)");
  }
}

}  // namespace

void add_compare(CLI::App& app, CompareArgs& args) {
  CLI::App* cmd = app.add_subcommand("compare", "Hold another engine's outputs on exported items to the reference, with the "
                                                "report's metrics, files and baseline gate");
  cmd->add_option("--model", args.model, "Model directory or GGUF file (default: the embedded model)");
  cmd->add_option("--items", args.items, "Items file written by kvcheck export")->required();
  cmd->add_option("--engine-output", args.engine_outputs,
                  "An engine's outputs: a directory of ITEM_ID.npy (+ *.jsonl), a .safetensors or a top-k .jsonl (repeatable)");
  cmd->add_option("--name", args.names, "The row name of each --engine-output, in order");
  cmd->add_option("--policies", args.policies, "kvcheck policies to run beside them, comma-separated; a spec keeps its own commas (default: none)");
  cmd->add_option("--budgets", args.budgets, "Tokens per head for evicting --policies (default 32,64,128)")->delimiter(',');
  cmd->add_option("--oracle-prompts", args.oracle_prompts, "Windows checked by the per-step oracle for --policies")->capture_default_str();
  cmd->add_option("--out", args.out, "Directory for report.json, report.md and report.html");
  cmd->add_option("--baseline", args.baseline, "Compare with this baseline; exit 1 on a regression");
  cmd->add_flag("--update-baseline", args.update_baseline, "Write --baseline from this run instead of comparing");
  cmd->add_option("--cache", args.cache, "Reference cache directory (default OUT/reference-cache)");
  cmd->add_option("--device", args.device, "cpu, cuda or cuda-resident (for --policies and --write-engine-output)")->capture_default_str();
  cmd->add_option("--threads", args.threads, "CPU threads (0: every core)");
  cmd->add_flag("--quiet", args.quiet, "No progress on stderr");
  cmd->add_option("--write-engine-output", args.write_engine_output,
                  "Write kvcheck's own engine output (--policy) on the items to PATH in the engine output format, then exit");
  cmd->add_option("--policy", args.policy, "With --write-engine-output: the policy spec kvcheck's engine runs");
  cmd->add_option("--top-k", args.top_k, "With --write-engine-output PATH.jsonl: log-probabilities per position");
}

int run_compare(const CompareArgs& args) {
  const auto started = std::chrono::steady_clock::now();
  check_flags(args);
  const std::filesystem::path dir = report_model_dir(args.model);
  const ReferenceModel model = ReferenceModel::load(dir);
  const std::string hash = model_hash(dir);
  ItemsFile items = read_items_file(args.items, model.config(), hash);
  const nlohmann::json& h = items.header;
  // Every input checked before the reference runs.
  std::vector<EngineOutput> outputs;
  for (const std::string& path : args.engine_outputs) {
    outputs.push_back(read_engine_output(path));
    check_engine_output(items, outputs.back(), model.config().vocab_size);
  }
  const std::vector<std::int64_t> budgets = args.budgets.empty() ? std::vector<std::int64_t>{32, 64, 128} : args.budgets;
  const std::vector<PolicyConfig> configs = report_configs(args.policies, budgets);
  const std::optional<ReportBaseline> baseline =
      args.baseline.empty() || args.update_baseline ? std::nullopt : std::optional(load_report_baseline(args.baseline));
  nlohmann::json settings = h.at("settings");
  settings.update({{"model_hash", hash},
                   {"heldout_hash", h.at("heldout_hash")},
                   {"retrieval_hash", h.at("retrieval_hash")},
                   {"items_hash", h.at("items_hash")},
                   {"device", args.device}});
  if (!configs.empty()) settings.update({{"budgets", budgets}, {"oracle_prompts", args.oracle_prompts}});
  if (baseline && baseline->settings != settings) {
    throw input_error(args.baseline, "settings",
                      "the baseline was made with other settings or items ({}): compare like with like, or rewrite it "
                      "with --update-baseline",
                      fmt::join(settings_differences(baseline->settings, settings), "; "));
  }

  // The reference: cached by model and items (the same ids, the same reference).
  const std::filesystem::path out_dir =
      args.out.empty() ? std::filesystem::path(args.write_engine_output).parent_path() : std::filesystem::path(args.out);
  if (!args.out.empty()) std::filesystem::create_directories(out_dir);
  const std::filesystem::path cache_dir = args.cache.empty() ? (out_dir.empty() ? "." : out_dir) / "reference-cache" : std::filesystem::path(args.cache);
  const std::string key = file_hash_of_string(nlohmann::json({{"compare", h.at("items_hash")}, {"model_hash", hash}}).dump());
  const auto t0 = std::chrono::steady_clock::now();
  const bool hit = load_or_compute_reference(model, items.inputs, cache_dir, key, "kvcheck compare");
  const double ref_s = seconds_since(t0);
  const double ref_ppl = perplexity(items.inputs.reference.nll, items.inputs.reference.predicted);

  ReportArgs sizing;
  sizing.device = args.device;
  sizing.threads = args.threads;
  const ReportMode mode{static_cast<std::int64_t>(items.text_ids.size()), items.inputs.prompt_tokens,
                        settings.at("continuation_tokens").get<std::int64_t>(), static_cast<std::int64_t>(items.retrieval_ids.size()),
                        args.oracle_prompts, budgets};
  const VerifyArgs run = report_run_args(sizing, mode, dir);
  if (!args.write_engine_output.empty()) {
    EngineCapture captured;
    measure_accuracy(model, items.inputs, run, args.policy, 0, true, &captured);
    write_engine_output(args.write_engine_output, items, captured, args.top_k);
    fmt::print("wrote {}'s engine output on {} to {}\n", args.policy, args.items, args.write_engine_output);
    return 0;
  }

  nlohmann::json rows = nlohmann::json::array(), notes = nlohmann::json::array();
  {
    ProgressBar bar("compare", "configurations", args.quiet);
    for (std::size_t i = 0; i < configs.size(); ++i) {
      const AccuracyRow row = measure_accuracy(model, items.inputs, run, configs[i].spec, args.oracle_prompts);
      rows.push_back(report_row_json(row, configs[i].spec, configs[i].budget, ref_ppl));
      bar.update(static_cast<std::int64_t>(i + 1), static_cast<std::int64_t>(configs.size()));
    }
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const EngineRow r = engine_row(items, outputs[i], args.names[i]);
    rows.push_back(engine_row_json(r, args.engine_outputs[i], ref_ppl));
    notes.push_back(fmt::format("Row `{}`: engine output {}; its KV cache is not seen (no bytes).", r.row.name, args.engine_outputs[i]));
    if (r.topk) {
      notes.push_back(fmt::format("Row `{}`: KL over the engine's top-{} tokens plus one bucket for the rest of the mass, a lower "
                                  "bound of the full KL (data-processing inequality); the reference's own top-{} tokens hold "
                                  "{:.4f} of its mass (mean over positions); Δp of a reference top token the engine does not "
                                  "list counts it as 0.", r.row.name, r.k_min, r.k_min, r.reference_coverage));
    }
  }
  nlohmann::json attention = nlohmann::json::array();
  for (const HeadAttentionStats& a : items.inputs.reference.attention) attention.push_back(head_attention_json(a));
  const nlohmann::json report = {{"format", "kvcheck-report"},
                                 {"version", 1},
                                 {"command", args.command_line},
                                 {"engine", {{"version", version_string()}, {"device", args.device}}},
                                 {"model", {{"path", dir.string()}, {"hash", hash}}},
                                 {"items", {{"path", args.items}, {"hash", h.at("items_hash")}}},
                                 {"datasets", {{"heldout_hash", h.at("heldout_hash")}, {"retrieval_hash", h.at("retrieval_hash")}}},
                                 {"settings", settings},
                                 {"reference", {{"perplexity", ref_ppl}, {"cached", hit}, {"wall_s", ref_s},
                                                {"prompt_source", items.inputs.origin}, {"attention", attention}}},
                                 {"rows", rows},
                                 {"notes", notes},
                                 {"spvllm_strategies", nullptr},
                                 {"run", {{"wall_s", seconds_since(started)}, {"peak_rss_bytes", peak_rss_bytes()}}}};
  return finish_report(report, ReportGate{out_dir, args.baseline, args.update_baseline, baseline});
}

}  // namespace kvcheck::cli
