// The parts of kvcheck report that kvcheck compare shares (cli/compare_command.cpp), factored out
// of cli/report_command.cpp with its behaviour unchanged: the sizes of a run (--quick and the
// sizing flags), the accuracy inputs' arguments, a row's report.json fields, and the end of a
// run: report.json / report.md / report.html written, the table printed, and the baseline gate
// (--baseline / --update-baseline; exit 1 with the regression table).
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/accuracy_run.h"
#include "cli/commands.h"
#include "cli/report_baseline.h"

namespace kvcheck::cli {

// The sizes of a run: --quick's or the full report's defaults, each overridden by its flag.
struct ReportMode {
  std::int64_t prompts, prompt_tokens, max_new_tokens, retrieval, oracle_prompts;
  std::vector<std::int64_t> budgets;
};
ReportMode report_mode(const ReportArgs& args);

// A policy at a budget (0: a policy without one), every configuration of a run.
struct PolicyConfig {
  std::string spec;
  std::int64_t budget;
};
// Each policy name at each budget (a policy without a budget once); an entry may be a list
// (split_policy_list: "int8,kv-bits:k=4,v=8"). InputError naming a bad policy
// before anything runs.
std::vector<PolicyConfig> report_configs(const std::vector<std::string>& policies, const std::vector<std::int64_t>& budgets);

// --model, or the embedded model when it is empty.
std::filesystem::path report_model_dir(const std::string& model);

// The arguments prepare_accuracy_inputs and measure_accuracy take for a report of this size:
// held-out text fed (not greedy), the given held-out and retrieval files.
VerifyArgs report_run_args(const ReportArgs& args, const ReportMode& mode, const std::filesystem::path& dir);

// Refuses "--retrieval 12" (a count where a file is named) before any model work.
void check_retrieval_flag(const std::string& retrieval_file);

// A policy row's report.json object: accuracy_row_json's fields and the KL percentiles, RMS Δp,
// perplexity ratio to the reference's, oracle counts and wall time (and the FP8 saturation counts
// of a policy storing FP8, warned about on stderr when any saturated).
nlohmann::json report_row_json(const AccuracyRow& row, const std::string& spec, std::int64_t budget, double reference_ppl);

// The FP8 saturation counts of a row storing FP8 (stores_fp8) added to its report.json object, and
// a warning on stderr naming the row when any element saturated. Both report modes use it.
void add_fp8_saturation(nlohmann::json& row_json, const std::string& name, bool stores_fp8, std::int64_t saturated,
                        std::int64_t stored);

// The report's baseline: --update-baseline without --baseline refused, then the baseline read
// unless it is being rewritten (InputError naming the file).
std::optional<ReportBaseline> report_baseline(const ReportArgs& args);
// InputError naming the baseline when it was made with other settings or data than `settings`.
void check_baseline_settings(const std::optional<ReportBaseline>& baseline, const std::string& file,
                             const nlohmann::json& settings);

// The gate's view of a report.json row.
BaselineRow baseline_row(const nlohmann::json& row);

// inputs.reference read from the reference cache under `cache_dir` for `key`, or computed (with
// the attention structure) and stored there (a warning from `who` on stderr when the cache cannot
// be written). True on a cache hit.
bool load_or_compute_reference(const ReferenceModel& model, AccuracyInputs& inputs, const std::filesystem::path& cache_dir,
                               const std::string& key, const char* who);

// Seconds since `t0`, the CPU seconds of this process so far (user and system, every thread), and
// its peak resident set so far, for report.json's "run" and the long report's phase lines.
double seconds_since(std::chrono::steady_clock::time_point t0);
double cpu_seconds();
std::int64_t peak_rss_bytes();

// Where a run's outputs go and how its gate runs.
struct ReportGate {
  std::filesystem::path out_dir;
  std::string baseline;  // empty: no gate
  bool update_baseline = false;
  std::optional<ReportBaseline> loaded;  // the baseline read before the run (unless update_baseline)
};

// Writes report.json, report.md and report.html under gate.out_dir, prints the Markdown table and
// the run line, then: with update_baseline writes the baseline from the rows (exit 1 if any oracle
// violation); with a loaded baseline prints the regressions (exit 1) or "no regression"; any
// oracle violation is exit 1 too. The exit code.
int finish_report(const nlohmann::json& report, const ReportGate& gate);

// kvcheck report --render FILE: report.md and report.html rewritten under out_dir from an existing
// report.json (no model run, no gate). InputError naming the file when it is not a kvcheck report
// or lacks a field the pages need. The exit code (0).
int render_report(const std::string& file, const std::filesystem::path& out_dir);

}  // namespace kvcheck::cli
