#include "cli/report_baseline.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include <fmt/format.h>

#include "reference/errors.h"

namespace kvcheck::cli {
namespace {

constexpr const char* kFormat = "kvcheck-report-baseline";

double number(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.contains(key)) throw input_error(where, key, "missing");
  const nlohmann::json& v = j.at(key);
  if (!v.is_number()) throw input_error(where, key, "must be a number, got {}", v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0.0) throw input_error(where, key, "must be finite and >= 0, got {}", v.dump());
  return x;
}

// A count: an integer in [min, 2^53] (exact as a double; a larger one would not fit the int64 it
// becomes without losing its meaning; casting an unchecked 1e86 to int64 is undefined behaviour).
std::int64_t count(const nlohmann::json& j, const char* key, const std::string& where, double min) {
  const double x = number(j, key, where);
  if (x < min || x > 9007199254740992.0 || x != std::floor(x)) {
    throw input_error(where, key, "must be an integer in [{}, 2^53], got {}", min, j.at(key).dump());
  }
  return static_cast<std::int64_t>(x);
}

}  // namespace

ReportBaseline parse_report_baseline(std::string_view text, const std::string& source) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded()) throw input_error(source, "json", "is not valid JSON");
  if (!j.is_object()) throw input_error(source, "json", "must be an object");
  if (!j.contains("format") || j.at("format") != kFormat) {
    throw input_error(source, "format", "must be \"{}\"", kFormat);
  }
  if (!j.contains("version") || j.at("version") != 1) throw input_error(source, "version", "must be 1");
  ReportBaseline b;
  b.settings = j.value("settings", nlohmann::json::object());
  if (!b.settings.is_object()) throw input_error(source, "settings", "must be an object");
  if (j.contains("tolerances")) {
    const nlohmann::json& t = j.at("tolerances");
    const std::string where = source + ": tolerances";
    if (!t.is_object()) throw input_error(source, "tolerances", "must be an object");
    if (t.contains("kl_rel")) b.tolerances.kl_rel = number(t, "kl_rel", where);
    if (t.contains("kl_abs")) b.tolerances.kl_abs = number(t, "kl_abs", where);
    if (t.contains("ppl_rel")) b.tolerances.ppl_rel = number(t, "ppl_rel", where);
    if (t.contains("accuracy_sigmas")) b.tolerances.accuracy_sigmas = number(t, "accuracy_sigmas", where);
  }
  if (!j.contains("rows") || !j.at("rows").is_array()) throw input_error(source, "rows", "must be an array");
  std::map<std::string, bool> seen;
  for (std::size_t i = 0; i < j.at("rows").size(); ++i) {
    const nlohmann::json& r = j.at("rows")[i];
    const std::string where = fmt::format("{}: rows[{}]", source, i);
    if (!r.is_object()) throw input_error(where, "row", "must be an object");
    if (!r.contains("policy") || !r.at("policy").is_string()) throw input_error(where, "policy", "must be a string");
    BaselineRow row;
    row.policy = r.at("policy").get<std::string>();
    if (seen[row.policy]) throw input_error(where, "policy", "{} appears twice", row.policy);
    seen[row.policy] = true;
    row.kl_mean = number(r, "kl_mean", where);
    row.perplexity_ratio = number(r, "perplexity_ratio", where);
    if (r.contains("retrieval_accuracy") && !r.at("retrieval_accuracy").is_null()) {
      row.retrieval_accuracy = number(r, "retrieval_accuracy", where);
      if (*row.retrieval_accuracy > 1.0) throw input_error(where, "retrieval_accuracy", "must be at most 1");
      row.retrieval_items = count(r, "retrieval_items", where, 1.0);
    }
    if (r.contains("oracle_violations")) row.oracle_violations = count(r, "oracle_violations", where, 0.0);
    b.rows.push_back(std::move(row));
  }
  return b;
}

ReportBaseline load_report_baseline(const std::string& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw input_error(file, "file", "cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_report_baseline(ss.str(), file);
}

nlohmann::json make_report_baseline(const nlohmann::json& settings, const std::vector<BaselineRow>& rows,
                                    const BaselineTolerances& t) {
  nlohmann::json out = nlohmann::json::array();
  for (const BaselineRow& r : rows) {
    out.push_back({{"policy", r.policy},
                   {"kl_mean", r.kl_mean},
                   {"perplexity_ratio", r.perplexity_ratio},
                   {"retrieval_accuracy", r.retrieval_accuracy ? nlohmann::json(*r.retrieval_accuracy) : nlohmann::json()},
                   {"retrieval_items", r.retrieval_items},
                   {"oracle_violations", r.oracle_violations}});
  }
  return {{"format", kFormat},
          {"version", 1},
          {"settings", settings},
          {"tolerances",
           {{"kl_rel", t.kl_rel}, {"kl_abs", t.kl_abs}, {"ppl_rel", t.ppl_rel}, {"accuracy_sigmas", t.accuracy_sigmas}}},
          {"rows", out}};
}

std::vector<std::string> settings_differences(const nlohmann::json& baseline, const nlohmann::json& now) {
  std::map<std::string, std::pair<std::string, std::string>> keys;  // key -> (baseline, now)
  for (const auto& [key, value] : baseline.items()) keys[key] = {value.dump(), "absent"};
  for (const auto& [key, value] : now.items()) {
    auto [it, inserted] = keys.try_emplace(key, "absent", value.dump());
    if (!inserted) it->second.second = value.dump();
  }
  std::vector<std::string> out;
  for (const auto& [key, values] : keys) {
    if (values.first != values.second) out.push_back(fmt::format("{}: baseline {}, now {}", key, values.first, values.second));
  }
  return out;
}

std::vector<Regression> compare_to_baseline(const ReportBaseline& baseline, const std::vector<BaselineRow>& current) {
  std::map<std::string, const BaselineRow*> now;
  for (const BaselineRow& r : current) now[r.policy] = &r;
  const BaselineTolerances& t = baseline.tolerances;
  std::vector<Regression> out;
  for (const BaselineRow& b : baseline.rows) {
    const auto it = now.find(b.policy);
    if (it == now.end()) {
      out.push_back({b.policy, "missing", 0.0, 0.0, 0.0});
      continue;
    }
    const BaselineRow& c = *it->second;
    const double kl_allowed = b.kl_mean * (1.0 + t.kl_rel) + t.kl_abs;
    if (!(c.kl_mean <= kl_allowed)) out.push_back({b.policy, "kl_mean", b.kl_mean, c.kl_mean, kl_allowed});
    const double ppl_allowed = b.perplexity_ratio * (1.0 + t.ppl_rel);
    if (!(c.perplexity_ratio <= ppl_allowed)) {
      out.push_back({b.policy, "perplexity_ratio", b.perplexity_ratio, c.perplexity_ratio, ppl_allowed});
    }
    if (b.retrieval_accuracy && b.retrieval_items > 0) {
      const double p = *b.retrieval_accuracy, n = static_cast<double>(b.retrieval_items);
      const double allowed = p - std::max(1.0 / n, t.accuracy_sigmas * std::sqrt(p * (1.0 - p) / n));
      const double got = c.retrieval_accuracy.value_or(-1.0);
      if (got < allowed - 1e-12) out.push_back({b.policy, "retrieval_accuracy", p, got, allowed});
    }
    if (c.oracle_violations > 0) {
      out.push_back({b.policy, "oracle_violations", static_cast<double>(b.oracle_violations),
                     static_cast<double>(c.oracle_violations), 0.0});
    }
  }
  return out;
}

std::string regression_table(const std::vector<Regression>& regressions) {
  if (regressions.empty()) return "";
  std::size_t w = 6;
  for (const Regression& r : regressions) w = std::max(w, r.policy.size());
  std::string s = fmt::format("{:<{}}  {:<18} {:>12} {:>12} {:>12} {:>9}\n", "policy", w, "metric", "baseline", "now",
                              "allowed", "change");
  for (const Regression& r : regressions) {
    if (r.metric == "missing") {
      s += fmt::format("{:<{}}  {:<18} {:>12} {:>12} {:>12} {:>9}\n", r.policy, w, "missing", "-", "-", "-", "lost");
      continue;
    }
    const std::string change =
        r.metric == "retrieval_accuracy"
            ? fmt::format("{:+.1f} pt", 100.0 * (r.current - r.baseline))
            : (r.baseline > 0.0 ? fmt::format("{:+.0f}%", 100.0 * (r.current / r.baseline - 1.0)) : std::string("-"));
    s += fmt::format("{:<{}}  {:<18} {:>12.4g} {:>12.4g} {:>12.4g} {:>9}\n", r.policy, w, r.metric, r.baseline, r.current,
                     r.allowed, change);
  }
  return s;
}

}  // namespace kvcheck::cli
