#include "cli/report_html.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>

namespace kvcheck::cli {
namespace {

std::string escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string family(const std::string& policy) { return policy.substr(0, policy.find(':')); }

const char* color_of(const std::string& fam) {
  static const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                                  "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
                                  "#7b4173", "#3182bd", "#e6550d", "#31a354"};
  static std::map<std::string, int> index;
  const auto it = index.emplace(fam, static_cast<int>(index.size())).first;
  return palette[it->second % static_cast<int>(std::size(palette))];
}

double num(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : std::nan("");
}

// A scatter plot of the rows: x = KV bytes vs fp16 (linear), y = metric (log10 when log_y).
std::string scatter(const nlohmann::json& rows, const char* metric, const std::string& y_label, bool log_y,
                    bool lower_is_better) {
  constexpr double W = 720, H = 420, L = 70, R = 200, T = 20, B = 50;
  std::vector<double> xs, ys;
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double x = num(rows[i], "kv_bytes_vs_fp16"), y = num(rows[i], metric);
    if (!std::isfinite(x) || !std::isfinite(y) || (log_y && y <= 0.0)) continue;
    xs.push_back(x);
    ys.push_back(log_y ? std::log10(y) : y);
    idx.push_back(i);
  }
  if (xs.empty()) return "<p>(no rows to plot)</p>";
  const double x0 = 0.0, x1 = std::max(1.05, *std::max_element(xs.begin(), xs.end()) * 1.05);
  double y0 = *std::min_element(ys.begin(), ys.end()), y1 = *std::max_element(ys.begin(), ys.end());
  if (log_y) {
    y0 = std::floor(y0);
    y1 = std::ceil(y1);
  } else {
    y0 = 0.0;
    y1 = std::max(1.0, y1);
  }
  if (y1 <= y0) y1 = y0 + 1.0;
  const auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  const auto py = [&](double y) { return H - B - (y - y0) / (y1 - y0) * (H - T - B); };
  std::string s = fmt::format(R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img" font-family="sans-serif" font-size="11">)svg", W, H);
  s += fmt::format(R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>)svg", L, T, W - L - R, H - T - B);
  for (int k = 0; k <= 5; ++k) {  // x ticks
    const double x = x0 + (x1 - x0) * k / 5.0;
    s += fmt::format(R"svg(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#ddd"/><text x="{0:.1f}" y="{3}" text-anchor="middle">{4:.2f}</text>)svg",
                     px(x), T, H - B, H - B + 15, x);
  }
  const int yticks = log_y ? static_cast<int>(y1 - y0) : 5;
  for (int k = 0; k <= yticks; ++k) {
    const double y = y0 + (y1 - y0) * k / yticks;
    const std::string label = log_y ? fmt::format("1e{:.0f}", y) : fmt::format("{:.1f}", y);
    s += fmt::format(R"svg(<line x1="{0}" x2="{1}" y1="{2:.1f}" y2="{2:.1f}" stroke="#ddd"/><text x="{3}" y="{4:.1f}" text-anchor="end">{5}</text>)svg",
                     L, W - R, py(y), L - 5, py(y) + 4, label);
  }
  s += fmt::format(R"svg(<text x="{}" y="{}" text-anchor="middle">KV bytes relative to full-fp16</text>)svg", (L + W - R) / 2, H - 12);
  s += fmt::format(R"svg(<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>)svg", (T + H - B) / 2, escape(y_label));
  // The Pareto front first, under the points.
  std::vector<double> front_y(ys);
  const std::vector<std::size_t> front = pareto_front(xs, front_y, lower_is_better);
  std::string poly;
  for (const std::size_t f : front) poly += fmt::format("{:.1f},{:.1f} ", px(xs[f]), py(ys[f]));
  s += fmt::format(R"svg(<polyline points="{}" fill="none" stroke="#000" stroke-width="1.5" stroke-dasharray="5,3"/>)svg", poly);
  std::map<std::string, bool> families;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const std::string policy = rows[idx[k]].at("policy").get<std::string>();
    const bool on_front = std::find(front.begin(), front.end(), k) != front.end();
    s += fmt::format(R"svg(<circle cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}" stroke="{}" stroke-width="{}"><title>{}: bytes {:.3f}, {} {:.4g}</title></circle>)svg",
                     px(xs[k]), py(ys[k]), on_front ? 6 : 4, color_of(family(policy)), on_front ? "#000" : "none",
                     on_front ? 1.5 : 0, escape(policy), xs[k], metric, log_y ? std::pow(10.0, ys[k]) : ys[k]);
    families[family(policy)] = true;
  }
  int row = 0;  // legend
  for (const auto& [fam, unused] : families) {
    const double y = T + 12 + 15 * row++;
    s += fmt::format(R"svg(<circle cx="{}" cy="{}" r="4" fill="{}"/><text x="{}" y="{}">{}</text>)svg", W - R + 15, y - 4,
                     color_of(fam), W - R + 24, y, escape(fam));
  }
  s += fmt::format(R"svg(<line x1="{0}" x2="{1}" y1="{2}" y2="{2}" stroke="#000" stroke-dasharray="5,3"/><text x="{3}" y="{4}">Pareto front</text>)svg",
                   W - R + 8, W - R + 22, T + 16 + 15 * row, W - R + 24, T + 20 + 15 * row);
  s += "</svg>";
  return s;
}

std::string heat_cell(double acc) {
  if (!std::isfinite(acc)) return "<td>-</td>";
  const int g = static_cast<int>(std::lround(80 + 150 * acc)), r = static_cast<int>(std::lround(230 - 150 * acc));
  return fmt::format(R"svg(<td style="background:rgb({},{},120)">{:.2f}</td>)svg", r, g, acc);
}

}  // namespace

std::vector<std::size_t> pareto_front(const std::vector<double>& x, const std::vector<double>& y, bool lower_is_better) {
  std::vector<std::size_t> order(x.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  const auto better = [&](double a, double b) { return lower_is_better ? a < b : a > b; };
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return x[a] != x[b] ? x[a] < x[b] : better(y[a], y[b]);
  });
  std::vector<std::size_t> front;
  for (const std::size_t i : order) {
    if (front.empty() || better(y[i], y[front.back()])) front.push_back(i);
  }
  return front;
}

std::string report_markdown(const nlohmann::json& report) {
  std::string s = fmt::format("# kvcheck accuracy report\n\nModel `{}` (hash {}), {} held-out prompts x ({} + {}) tokens, "
                              "{} retrieval items; reference perplexity {:.3f}.\n\n",
                              report.at("model").at("path").get<std::string>(), report.at("model").at("hash").get<std::string>(),
                              report.at("settings").at("prompts").get<std::int64_t>(),
                              report.at("settings").at("prompt_tokens").get<std::int64_t>(),
                              report.at("settings").at("continuation_tokens").get<std::int64_t>(),
                              report.at("settings").at("retrieval_items").get<std::int64_t>(),
                              report.at("reference").at("perplexity").get<double>());
  s += "| policy | KV bytes vs fp16 | KL mean ± s.e. | KL p99 | KL max | top-1 | RMS Δp | ppl ratio | retrieval | oracle violations | wall s |\n";
  s += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const nlohmann::json& r : report.at("rows")) {
    s += fmt::format("| `{}` | {:.3f} | {:.2e} ± {:.1e} | {:.2e} | {:.2e} | {:.4f} | {:.4f} | {:.4f} | {} | {} | {:.1f} |\n",
                     r.at("policy").get<std::string>(), num(r, "kv_bytes_vs_fp16"), num(r, "kl_mean"), num(r, "kl_stderr"),
                     num(r, "kl_p99"), num(r, "kl_max"), num(r, "top1_agreement"), num(r, "rms_delta_p"),
                     num(r, "perplexity_ratio"),
                     r.at("retrieval_accuracy").is_null() ? std::string("-") : fmt::format("{:.3f}", num(r, "retrieval_accuracy")),
                     r.at("oracle_violations").get<std::int64_t>(), num(r, "wall_s"));
  }
  return s;
}

std::string report_html(const nlohmann::json& report) {
  const nlohmann::json& rows = report.at("rows");
  std::string s = R"svg(<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>kvcheck accuracy report</title>
<style>body{font-family:sans-serif;margin:24px;max-width:1200px}table{border-collapse:collapse;font-size:12px}
td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}td:first-child,th:first-child{text-align:left}
h2{margin-top:28px}.note{color:#555;font-size:13px}</style></head><body>)svg";
  s += "<h1>kvcheck accuracy report</h1>";
  s += fmt::format(R"svg(<p class="note">Model <code>{}</code> (hash {}); {} held-out prompts × ({} + {}) tokens; {} retrieval items; reference perplexity {:.3f}; command <code>{}</code>.</p>)svg",
                   escape(report.at("model").at("path").get<std::string>()), report.at("model").at("hash").get<std::string>(),
                   report.at("settings").at("prompts").get<std::int64_t>(), report.at("settings").at("prompt_tokens").get<std::int64_t>(),
                   report.at("settings").at("continuation_tokens").get<std::int64_t>(),
                   report.at("settings").at("retrieval_items").get<std::int64_t>(), report.at("reference").at("perplexity").get<double>(),
                   escape(report.at("command").get<std::string>()));
  s += "<h2>KV bytes against KL divergence</h2><p class=\"note\">Mean KL(P<sub>ref</sub> ‖ P<sub>engine</sub>) per position on held-out text (log scale). Ringed points form the Pareto front: nothing holds fewer bytes at lower KL.</p>";
  s += scatter(rows, "kl_mean", "KL mean (log10)", true, true);
  s += "<h2>KV bytes against retrieval accuracy</h2><p class=\"note\">Greedy exact match on the retrieval items; the front: nothing holds fewer bytes at higher accuracy.</p>";
  s += scatter(rows, "retrieval_accuracy", "retrieval exact match", false, false);
  // Retrieval by length.
  std::vector<std::string> lengths;
  for (const nlohmann::json& r : rows) {
    for (const auto& [len, unused] : r.at("retrieval_accuracy_by_length").items()) {
      if (std::find(lengths.begin(), lengths.end(), len) == lengths.end()) lengths.push_back(len);
    }
  }
  std::sort(lengths.begin(), lengths.end(), [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  s += "<h2>Retrieval accuracy by context length</h2><table><tr><th>policy</th><th>bytes</th>";
  for (const std::string& l : lengths) s += fmt::format("<th>{} tokens</th>", l);
  s += "</tr>";
  for (const nlohmann::json& r : rows) {
    s += fmt::format("<tr><td>{}</td><td>{:.3f}</td>", escape(r.at("policy").get<std::string>()), num(r, "kv_bytes_vs_fp16"));
    for (const std::string& l : lengths) {
      const nlohmann::json& by = r.at("retrieval_accuracy_by_length");
      s += heat_cell(by.contains(l) ? by.at(l).get<double>() : std::nan(""));
    }
    s += "</tr>";
  }
  s += "</table><h2>Summary</h2><table><tr><th>policy</th><th>bytes</th><th>KL mean</th><th>± s.e.</th><th>KL p99.9</th><th>p99</th><th>p95</th><th>p90</th><th>p50</th><th>max</th><th>top-1</th><th>RMS Δp</th><th>ppl ratio</th><th>retrieval</th><th>oracle checks</th><th>violations</th><th>wall s</th></tr>";
  for (const nlohmann::json& r : rows) {
    s += fmt::format("<tr><td>{}</td><td>{:.3f}</td><td>{:.2e}</td><td>{:.1e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.4f}</td><td>{:.4f}</td><td>{:.4f}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td></tr>",
                     escape(r.at("policy").get<std::string>()), num(r, "kv_bytes_vs_fp16"), num(r, "kl_mean"), num(r, "kl_stderr"),
                     num(r, "kl_p999"), num(r, "kl_p99"), num(r, "kl_p95"), num(r, "kl_p90"), num(r, "kl_p50"), num(r, "kl_max"),
                     num(r, "top1_agreement"), num(r, "rms_delta_p"), num(r, "perplexity_ratio"),
                     r.at("retrieval_accuracy").is_null() ? std::string("-") : fmt::format("{:.3f}", num(r, "retrieval_accuracy")),
                     r.at("oracle_checks").get<std::int64_t>(), r.at("oracle_violations").get<std::int64_t>(), num(r, "wall_s"));
  }
  s += "</table></body></html>\n";
  return s;
}

}  // namespace kvcheck::cli
