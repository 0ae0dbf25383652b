#include "cli/report_pipeline.h"

#include <fstream>
#include <sstream>

#include <sys/resource.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/json_file.h"
#include "cli/report_html.h"
#include "cli/report_reference_cache.h"
#include "optimized/kv_policy.h"
#include "reference/errors.h"

namespace kvcheck::cli {
namespace {

constexpr std::int64_t kUnset = -1;

void write_text(const std::filesystem::path& file, const std::string& text) {
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw input_error(file.string(), "--out", "cannot be written");
    out << text;
  }
  std::filesystem::rename(tmp, file);
}

}  // namespace

ReportMode report_mode(const ReportArgs& a) {
  ReportMode m = a.quick ? ReportMode{2, 64, 32, 12, 1, {32, 64}} : ReportMode{8, 128, 64, 48, 1, {32, 64, 128}};
  if (a.prompts > 0) m.prompts = a.prompts;
  if (a.prompt_tokens > 0) m.prompt_tokens = a.prompt_tokens;
  if (a.max_new_tokens > 0) m.max_new_tokens = a.max_new_tokens;
  if (a.retrieval_items != kUnset) m.retrieval = a.retrieval_items;
  if (a.oracle_prompts != kUnset) m.oracle_prompts = a.oracle_prompts;
  if (!a.budgets.empty()) m.budgets = a.budgets;
  return m;
}

std::vector<PolicyConfig> report_configs(const std::vector<std::string>& policies, const std::vector<std::int64_t>& budgets) {
  std::vector<PolicyConfig> configs;
  std::vector<std::string> names;
  for (const std::string& list : policies) {
    for (std::string& name : split_policy_list(list)) names.push_back(std::move(name));
  }
  for (const std::string& name : names) {
    make_policy(name);
    if (!policy_spec_at_budget(name, 1)) {
      configs.push_back({name, 0});
      continue;
    }
    for (const std::int64_t b : budgets) configs.push_back({*policy_spec_at_budget(name, b), b});
  }
  return configs;
}

std::filesystem::path report_model_dir(const std::string& model) {
  return model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(model);
}

VerifyArgs report_run_args(const ReportArgs& args, const ReportMode& mode, const std::filesystem::path& dir) {
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
  return run;
}

void check_retrieval_flag(const std::string& retrieval_file) {
  // --retrieval N counted items before --retrieval FILE named them: say so rather than "12: not found".
  std::error_code ec;
  if (!retrieval_file.empty() && retrieval_file.find_first_not_of("0123456789") == std::string::npos &&
      !std::filesystem::exists(retrieval_file, ec)) {
    throw input_error("--retrieval", retrieval_file,
                      "names a retrieval file (JSONL); the number of retrieval items is --retrieval-items N");
  }
}

bool load_or_compute_reference(const ReferenceModel& model, AccuracyInputs& inputs, const std::filesystem::path& cache_dir,
                               const std::string& key, const char* who) {
  std::optional<TextReference> cached = load_cached_reference(cache_dir, key, inputs, model.config());
  const bool hit = cached.has_value();
  inputs.reference = hit ? std::move(*cached) : compute_text_reference(model, inputs, true);
  if (!hit && !store_cached_reference(cache_dir, key, inputs.reference)) {
    fmt::print(stderr, "{}: warning: the reference cache {} could not be written; the next run computes it again\n", who,
               cache_dir.string());
  }
  return hit;
}

// Seconds since `t0`, the CPU seconds of this process so far (user and system, every thread), and
// its peak resident set so far (getrusage: the kernel's high-water mark, KiB on Linux), for the run
// line, the long report's phase lines and report.json's "run".
double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double cpu_seconds() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  const auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return s(usage.ru_utime) + s(usage.ru_stime);
}
std::int64_t peak_rss_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

nlohmann::json report_row_json(const AccuracyRow& row, const std::string& spec, std::int64_t budget, double reference_ppl) {
  nlohmann::json j = accuracy_row_json(row, spec, budget);
  j.update({{"kl_p999", row.dist.kl_p999},
            {"kl_p95", row.dist.kl_p95},
            {"kl_p90", row.dist.kl_p90},
            {"kl_p50", row.dist.kl_p50},
            {"kl_max", row.dist.kl_max},
            {"rms_delta_p", row.dist.rms_delta_p},
            {"perplexity_ratio", row.ppl / reference_ppl},
            {"oracle_checks", row.oracle_checks},
            {"oracle_violations", row.oracle_violations},
            {"wall_s", row.wall_s}});
  add_fp8_saturation(j, row.name, row.stores_fp8, row.fp8_saturated, row.fp8_stored);
  return j;
}

void add_fp8_saturation(nlohmann::json& row_json, const std::string& name, bool stores_fp8, std::int64_t saturated,
                        std::int64_t stored) {
  if (!stores_fp8) return;
  row_json.update({{"fp8_saturated", saturated}, {"fp8_stored", stored}});
  if (saturated > 0) {
    fmt::print(stderr, "kvcheck report: warning: {}: {} of {} FP8 key/value elements saturated (beyond 448 x "
               "their head's scale, clamped); fp8:scale=page or fp8:scale=calibrated avoid it\n",
               name, saturated, stored);
  }
}

std::optional<ReportBaseline> report_baseline(const ReportArgs& args) {
  if (args.update_baseline && args.baseline.empty()) {
    throw input_error("kvcheck report", "--update-baseline", "needs --baseline FILE to write");
  }
  if (args.baseline.empty() || args.update_baseline) return std::nullopt;
  return load_report_baseline(args.baseline);
}

void check_baseline_settings(const std::optional<ReportBaseline>& baseline, const std::string& file,
                             const nlohmann::json& settings) {
  if (baseline && baseline->settings != settings) {
    throw input_error(file, "settings",
                      "the baseline was made with other settings or data ({}): compare like with like, or rewrite it "
                      "with --update-baseline",
                      fmt::join(settings_differences(baseline->settings, settings), "; "));
  }
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

int finish_report(const nlohmann::json& report, const ReportGate& gate) {
  write_json_atomically(gate.out_dir / "report.json", report, "--out");
  write_text(gate.out_dir / "report.md", report_markdown(report));
  write_text(gate.out_dir / "report.html", report_html(report));
  fmt::print("{}", report_markdown(report));
  fmt::print("\nreport: {}\n", (std::filesystem::absolute(gate.out_dir) / "report.html").string());
  fmt::print("run: {:.1f} s wall, peak RSS {:.0f} MB\n", report.at("run").at("wall_s").get<double>(),
             static_cast<double>(report.at("run").at("peak_rss_bytes").get<std::int64_t>()) / 1e6);

  std::vector<BaselineRow> current;
  std::int64_t violations = 0;
  for (const nlohmann::json& r : report.at("rows")) {
    current.push_back(baseline_row(r));
    violations += r.at("oracle_violations").get<std::int64_t>();
  }
  if (gate.update_baseline) {
    write_json_atomically(gate.baseline, make_report_baseline(report.at("settings"), current, BaselineTolerances{}),
                          "--baseline");
    fmt::print("baseline written: {}\n", gate.baseline);
    return violations > 0 ? 1 : 0;
  }
  if (gate.loaded) {
    const std::vector<Regression> regressions = compare_to_baseline(*gate.loaded, current);
    if (!regressions.empty()) {
      fmt::print("\nREGRESSED against {} ({} finding(s)):\n{}", gate.baseline, regressions.size(),
                 regression_table(regressions));
      return 1;
    }
    fmt::print("no regression against {} ({} rows)\n", gate.baseline, gate.loaded->rows.size());
  }
  if (violations > 0) {
    fmt::print("per-step oracle: {} violation(s)\n", violations);
    return 1;
  }
  return 0;
}

int render_report(const std::string& file, const std::filesystem::path& out_dir) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw input_error(file, "--render", "cannot be read");
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json report = nlohmann::json::parse(text.str(), nullptr, false);
  if (report.is_discarded() || !report.is_object()) throw input_error(file, "json", "is not a JSON object");
  if (!report.contains("format") || report.at("format") != "kvcheck-report") {
    throw input_error(file, "format", "must be \"kvcheck-report\" (a report.json of kvcheck report or compare)");
  }
  std::string md, html;
  try {
    md = report_markdown(report);
    html = report_html(report);
  } catch (const nlohmann::json::exception& e) {
    throw input_error(file, "json", "cannot be rendered: {}", e.what());
  }
  std::filesystem::create_directories(out_dir);
  write_text(out_dir / "report.md", md);
  write_text(out_dir / "report.html", html);
  fmt::print("report: {}\n", (std::filesystem::absolute(out_dir) / "report.html").string());
  return 0;
}

}  // namespace kvcheck::cli
