// The accuracy regression gate of kvcheck report (--baseline FILE): each row of a report is held
// to the row of the same policy in a committed baseline, with the tolerances the baseline states:
//   kl_mean           relative: regressed when kl > base * (1 + kl_rel) + kl_abs
//   perplexity_ratio  relative: regressed when ratio > base * (1 + ppl_rel)
//   retrieval         absolute points with the binomial uncertainty of the item count n:
//                     regressed when acc < base - max(1 / n, sigmas * sqrt(base (1 - base) / n))
//   oracle            any per-step oracle violation is a regression
// A policy of the baseline missing from the report is a regression too (a row lost silently);
// a report row the baseline lacks is listed as new, not failed.
//
// Baseline file (JSON, format "kvcheck-report-baseline", version 1):
//   {"format": ..., "version": 1, "settings": {...the report's settings...},
//    "tolerances": {"kl_rel": 0.05, "kl_abs": 1e-7, "ppl_rel": 0.005, "accuracy_sigmas": 2.0},
//    "rows": [{"policy": NAME, "kl_mean": x, "perplexity_ratio": x, "retrieval_accuracy": x | null,
//              "retrieval_items": n}, ...]}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvcheck::cli {

struct BaselineTolerances {
  double kl_rel = 0.05;
  double kl_abs = 1e-7;
  double ppl_rel = 0.005;
  double accuracy_sigmas = 2.0;
};

struct BaselineRow {
  std::string policy;
  double kl_mean = 0.0;
  double perplexity_ratio = 0.0;
  std::optional<double> retrieval_accuracy;
  std::int64_t retrieval_items = 0;
  std::int64_t oracle_violations = 0;
};

struct ReportBaseline {
  nlohmann::json settings;
  BaselineTolerances tolerances;
  std::vector<BaselineRow> rows;
};

// Parses a baseline's text; InputError naming `source` and the field (rows[i].kl_mean, ...) for
// anything malformed: not JSON, another format or version, a missing or mistyped field, a
// negative or non-finite value, a duplicate policy.
ReportBaseline parse_report_baseline(std::string_view text, const std::string& source);
ReportBaseline load_report_baseline(const std::string& file);
// The baseline of a report's rows (report.json's "rows" objects) with these tolerances.
nlohmann::json make_report_baseline(const nlohmann::json& settings, const std::vector<BaselineRow>& rows,
                                    const BaselineTolerances& tolerances);

struct Regression {
  std::string policy;
  std::string metric;  // "kl_mean", "perplexity_ratio", "retrieval_accuracy", "oracle_violations", "missing"
  double baseline = 0.0, current = 0.0, allowed = 0.0;
};

// The settings in which a baseline and a report differ, one "KEY: baseline X, now Y" per key (a
// key only one of them has reads "absent" on the other side), in key order.
std::vector<std::string> settings_differences(const nlohmann::json& baseline, const nlohmann::json& now);

std::vector<Regression> compare_to_baseline(const ReportBaseline& baseline, const std::vector<BaselineRow>& current);
// A readable table of the regressions (empty string when there is none).
std::string regression_table(const std::vector<Regression>& regressions);

}  // namespace kvcheck::cli
