#include "cli/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
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

constexpr const char* kPalette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
                                    "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39",
                                    "#7b4173", "#3182bd", "#e6550d", "#31a354"};
const char* palette(std::size_t i) { return kPalette[i % std::size(kPalette)]; }

// One mark per policy family, the same in every scatter plot of one report: ten colors, then the
// same ten as squares, then as diamonds, in the order the report first meets each family (one map
// per report, so one report's marks never depend on the reports drawn before it in the same
// process). Thirty families before two share a mark; the registry has nineteen.
enum class MarkShape { kCircle, kSquare, kDiamond };
struct FamilyMark {
  const char* color;
  MarkShape shape;
};
class FamilyMarks {
 public:
  FamilyMark of(const std::string& fam) {
    constexpr std::size_t kColors = 10;
    const std::size_t i = index_.emplace(fam, index_.size()).first->second;
    return {palette(i % kColors), static_cast<MarkShape>((i / kColors) % 3)};
  }

 private:
  std::map<std::string, std::size_t> index_;
};

// A point mark of "radius" r centred on (x, y); `inner` goes inside the element (a <title>).
std::string point_mark(const FamilyMark& mark, double x, double y, double r, const char* stroke, double stroke_width,
                       const std::string& inner) {
  switch (mark.shape) {
    case MarkShape::kSquare:
      return fmt::format(R"svg(<rect x="{:.1f}" y="{:.1f}" width="{:.1f}" height="{:.1f}" fill="{}" stroke="{}" stroke-width="{}">{}</rect>)svg",
                         x - 0.9 * r, y - 0.9 * r, 1.8 * r, 1.8 * r, mark.color, stroke, stroke_width, inner);
    case MarkShape::kDiamond:
      return fmt::format(R"svg(<polygon points="{:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f} {:.1f},{:.1f}" fill="{}" stroke="{}" stroke-width="{}">{}</polygon>)svg",
                         x, y - 1.2 * r, x + 1.2 * r, y, x, y + 1.2 * r, x - 1.2 * r, y, mark.color, stroke, stroke_width, inner);
    case MarkShape::kCircle:
      break;
  }
  return fmt::format(R"svg(<circle cx="{:.1f}" cy="{:.1f}" r="{}" fill="{}" stroke="{}" stroke-width="{}">{}</circle>)svg", x, y,
                     r, mark.color, stroke, stroke_width, inner);
}

// Dash patterns that keep overlapping lines apart (a later line over an earlier one shows both).
const char* dash_pattern(std::size_t i) {
  static const char* dashes[] = {"none", "7,4", "2,3", "10,3,2,3"};
  return dashes[i % std::size(dashes)];
}

double num(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : std::nan("");
}

// A row's KV bytes vs fp16, or "-" where it has none (another engine's row in `kvcheck compare`).
std::string bytes_text(const nlohmann::json& r) {
  const double b = num(r, "kv_bytes_vs_fp16");
  return std::isfinite(b) ? fmt::format("{:.3f}", b) : std::string("-");
}

}  // namespace

double nice_step(double span, int target, bool integer) {
  if (!(span > 0.0) || target < 1) return 1.0;
  const double raw = span / target;
  const double decade = std::pow(10.0, std::floor(std::log10(raw)));
  double step = 10.0 * decade;
  for (const double m : {1.0, 2.0, 2.5, 5.0}) {
    if (integer && m == 2.5) continue;
    // The first multiple that does not give more than `target` parts, rounding to the nearest.
    if (m * decade >= raw * 0.75) {
      step = m * decade;
      break;
    }
  }
  return integer ? std::max(1.0, std::round(step)) : step;
}

namespace {

// `top` rounded up to a multiple of `step` (a small tolerance keeps an exact multiple where it is).
double round_up(double top, double step) { return std::ceil(top / step - 1e-9) * step; }

// report.json's "notes" (kvcheck compare: what an engine row is and how its KL was taken).
std::vector<std::string> report_notes(const nlohmann::json& report) {
  std::vector<std::string> notes;
  if (report.contains("notes") && report.at("notes").is_array()) {
    for (const nlohmann::json& n : report.at("notes")) notes.push_back(n.get<std::string>());
  }
  return notes;
}

// The text prompts: held-out text, or seeded random ids when the model has no tokenizer
// (reference.prompt_source, as verify_prompts.cpp names it); then no retrieval items either.
bool random_prompts(const nlohmann::json& report) {
  const nlohmann::json& ref = report.at("reference");
  return ref.contains("prompt_source") && ref.at("prompt_source").is_string() &&
         ref.at("prompt_source").get<std::string>().starts_with("random ids");
}

// What random prompts mean for the numbers below them.
std::string random_prompts_note(const nlohmann::json& report) {
  return fmt::format("Warning: no tokenizer ({}): the prompts are seeded random token ids, not text, and the "
                     "retrieval items are skipped. KL and top-1 then say how close the engine stays to the reference, "
                     "not how a policy does on language. kvcheck reads a Hugging Face tokenizer.json or a "
                     "SentencePiece tokenizer.model from the model directory.",
                     report.at("reference").at("prompt_source").get<std::string>());
}

// One warning per row whose FP8 keys or values saturated (fp8_saturated > 0; the field is only in
// rows of policies that store FP8).
std::vector<std::string> fp8_saturation_notes(const nlohmann::json& report) {
  std::vector<std::string> notes;
  for (const nlohmann::json& r : report.at("rows")) {
    if (!r.contains("fp8_saturated") || r.at("fp8_saturated").get<std::int64_t>() == 0) continue;
    notes.push_back(fmt::format(
        "Warning: {}: {} of {} FP8 key/value elements saturated over the text prompts (beyond 448 x their head's "
        "scale, clamped), and its numbers include that error. The default fp8 scale is the prompt's amax, which later "
        "tokens exceed; fp8:scale=page and fp8:scale=calibrated set it otherwise.",
        r.at("policy").get<std::string>(), r.at("fp8_saturated").get<std::int64_t>(),
        r.at("fp8_stored").get<std::int64_t>()));
  }
  return notes;
}

// The reference's perplexity: three decimals, or four significant digits with an exponent past a
// million (a random-weight model of a real shape has one near 1e90, which would print 90 digits).
std::string perplexity_text(const nlohmann::json& report) {
  const double ppl = report.at("reference").at("perplexity").get<double>();
  return ppl < 1e6 ? fmt::format("{:.3f}", ppl) : fmt::format("{:.4g}", ppl);
}

// "8 held-out prompts x (128 + 64) tokens; 48 retrieval items" with `times` for the x.
std::string inputs_phrase(const nlohmann::json& report, const char* times, const char* sep) {
  const nlohmann::json& st = report.at("settings");
  const bool random = random_prompts(report);
  return fmt::format("{} {} {} ({} + {}) tokens{}{}", st.at("prompts").get<std::int64_t>(),
                     random ? "prompts of seeded random token ids" : "held-out prompts", times,
                     st.at("prompt_tokens").get<std::int64_t>(), st.at("continuation_tokens").get<std::int64_t>(), sep,
                     random ? std::string("retrieval skipped (the model has no tokenizer)")
                            : fmt::format("{} retrieval items", st.at("retrieval_items").get<std::int64_t>()));
}

// A plot's frame: the data range mapped into a W x H picture with margins, grid lines, tick labels
// and axis titles (y in log10 units when log_y).
struct Axes {
  // P: inner padding, so that a point or line at the edge of the data range stays clear of the frame.
  static constexpr double W = 720, H = 420, L = 70, R = 200, T = 20, B = 50, P = 6;
  double x0, x1, y0, y1;
  bool log_y = false;

  double px(double x) const { return L + (x - x0) / (x1 - x0) * (W - L - R); }
  double py(double y) const { return H - B - P - (y - y0) / (y1 - y0) * (H - T - B - 2 * P); }

  // The opening <svg> and the frame. Ticks sit on round numbers (nice_step): every multiple of the
  // step within the range, integers only when `integer_x`; a log y axis has one per power of ten.
  std::string open(const std::string& x_label, const std::string& y_label, bool integer_x) const {
    std::string s = fmt::format(R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img" font-family="sans-serif" font-size="11">)svg", W, H);
    s += fmt::format(R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>)svg", L, T, W - L - R, H - T - B);
    const double xstep = nice_step(x1 - x0, integer_x ? 8 : 5, integer_x);
    for (double x = std::ceil(x0 / xstep - 1e-9) * xstep; x <= x1 + 1e-9 * xstep; x += xstep) {
      s += fmt::format(R"svg(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#ddd"/><text x="{0:.1f}" y="{3}" text-anchor="middle">{4:.6g}</text>)svg",
                       px(x), T, H - B, H - B + 15, std::abs(x) < 1e-12 ? 0.0 : x);
    }
    const double ystep = log_y ? 1.0 : nice_step(y1 - y0, 5, false);
    for (double y = std::ceil(y0 / ystep - 1e-9) * ystep; y <= y1 + 1e-9 * ystep; y += ystep) {
      const std::string label = log_y ? fmt::format("1e{:.0f}", y) : fmt::format("{:.6g}", std::abs(y) < 1e-12 ? 0.0 : y);
      s += fmt::format(R"svg(<line x1="{0}" x2="{1}" y1="{2:.1f}" y2="{2:.1f}" stroke="#ddd"/><text x="{3}" y="{4:.1f}" text-anchor="end">{5}</text>)svg",
                       L, W - R, py(y), L - 5, py(y) + 4, label);
    }
    s += fmt::format(R"svg(<text x="{}" y="{}" text-anchor="middle">{}</text>)svg", (L + W - R) / 2, H - 12, escape(x_label));
    s += fmt::format(R"svg(<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>)svg", (T + H - B) / 2, escape(y_label));
    return s;
  }
  // A legend entry at `row` (0 first) on the right: a line series' dash pattern in its color.
  std::string legend(int row, const char* color, const std::string& label, const char* dash) const {
    const double y = T + 12 + 15 * row;
    return fmt::format(R"svg(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-width="2" stroke-dasharray="{}"/>)svg",
                       W - R + 4, W - R + 22, y - 4, y - 4, color, dash) +
           legend_label(y, label);
  }
  // A legend entry at `row` for a scatter's family: its point mark.
  std::string legend(int row, const FamilyMark& mark, const std::string& label) const {
    const double y = T + 12 + 15 * row;
    return point_mark(mark, W - R + 15, y - 4, 4, "none", 0, "") + legend_label(y, label);
  }
  std::string legend_label(double y, const std::string& label) const {
    return fmt::format(R"svg(<text x="{}" y="{}">{}</text>)svg", W - R + 26, y, escape(label));
  }
};

// A scatter plot of the rows: x = x_metric (KV bytes held, or read per decode step, vs fp16;
// linear), y = metric (log10 when log_y).
std::string scatter(const nlohmann::json& rows, const char* metric, const std::string& y_label, bool log_y,
                    bool lower_is_better, FamilyMarks& marks, const char* x_metric = "kv_bytes_vs_fp16",
                    const std::string& x_label = "KV bytes relative to full-fp16") {
  std::vector<double> xs, ys;
  std::vector<std::size_t> idx;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double x = num(rows[i], x_metric), y = num(rows[i], metric);
    if (!std::isfinite(x) || !std::isfinite(y) || (log_y && y <= 0.0)) continue;
    xs.push_back(x);
    ys.push_back(log_y ? std::log10(y) : y);
    idx.push_back(i);
  }
  if (xs.empty()) return "<p>(no rows to plot)</p>";
  const double x_top = std::max(1.05, *std::max_element(xs.begin(), xs.end()) * 1.05);
  Axes a{0.0, round_up(x_top, nice_step(x_top, 5, false)), *std::min_element(ys.begin(), ys.end()),
         *std::max_element(ys.begin(), ys.end()), log_y};
  if (log_y) {
    a.y0 = std::floor(a.y0);
    a.y1 = std::ceil(a.y1);
  } else {
    a.y0 = 0.0;
    a.y1 = std::max(1.0, a.y1);
    a.y1 = round_up(a.y1, nice_step(a.y1, 5, false));
  }
  if (a.y1 <= a.y0) a.y1 = a.y0 + 1.0;
  std::string s = a.open(x_label, y_label, false);
  // The Pareto front first, under the points.
  const std::vector<std::size_t> front = pareto_front(xs, ys, lower_is_better);
  std::string poly;
  for (const std::size_t f : front) poly += fmt::format("{:.1f},{:.1f} ", a.px(xs[f]), a.py(ys[f]));
  s += fmt::format(R"svg(<polyline points="{}" fill="none" stroke="#000" stroke-width="1.5" stroke-dasharray="5,3"/>)svg", poly);
  std::map<std::string, bool> families;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const std::string policy = rows[idx[k]].at("policy").get<std::string>();
    const bool on_front = std::find(front.begin(), front.end(), k) != front.end();
    s += point_mark(marks.of(family(policy)), a.px(xs[k]), a.py(ys[k]), on_front ? 6 : 4, on_front ? "#000" : "none",
                    on_front ? 1.5 : 0,
                    fmt::format("<title>{}: bytes {:.3f}, {} {:.4g}</title>", escape(policy), xs[k], metric,
                                log_y ? std::pow(10.0, ys[k]) : ys[k]));
    families[family(policy)] = true;
  }
  int row = 0;
  for (const auto& [fam, unused] : families) s += a.legend(row++, marks.of(fam), fam);
  s += fmt::format(R"svg(<line x1="{0}" x2="{1}" y1="{2}" y2="{2}" stroke="#000" stroke-dasharray="5,3"/><text x="{3}" y="{4}">Pareto front</text>)svg",
                   Axes::W - Axes::R + 8, Axes::W - Axes::R + 22, Axes::T + 16 + 15 * row, Axes::W - Axes::R + 26,
                   Axes::T + 20 + 15 * row);
  s += "</svg>";
  return s;
}

struct Series {
  std::string label;
  std::vector<double> y;  // at x = x_first, x_first + 1, ...
  const char* color = nullptr;  // default: the series' place in the palette
  const char* dash = nullptr;   // default: the series' place in dash_pattern
};

// Lines over integer x (from x_first), y from 0 to at least y_min_top; each series its own color
// and dash pattern unless it names them.
std::string line_chart(const std::vector<Series>& series, double x_first, const std::string& x_label,
                       const std::string& y_label, double y_min_top) {
  double x_last = x_first + 1, y_top = y_min_top;
  for (const Series& se : series) {
    x_last = std::max(x_last, x_first + static_cast<double>(se.y.size()) - 1);
    for (const double y : se.y) y_top = std::max(y_top, y * 1.05);
  }
  const Axes a{x_first, x_last, 0.0, round_up(y_top, nice_step(y_top, 5, false)), false};
  std::string s = a.open(x_label, y_label, true);
  for (std::size_t i = 0; i < series.size(); ++i) {
    std::string poly;
    for (std::size_t k = 0; k < series[i].y.size(); ++k) {
      poly += fmt::format("{:.1f},{:.1f} ", a.px(x_first + static_cast<double>(k)), a.py(series[i].y[k]));
    }
    const char* color = series[i].color ? series[i].color : palette(i);
    const char* dash = series[i].dash ? series[i].dash : dash_pattern(i);
    s += fmt::format(R"svg(<polyline points="{}" fill="none" stroke="{}" stroke-width="2" stroke-dasharray="{}"><title>{}</title></polyline>)svg",
                     poly, color, dash, escape(series[i].label));
    s += a.legend(static_cast<int>(i), color, series[i].label, dash);
  }
  s += "</svg>";
  return s;
}

// Tokens held per kv head in each layer, for XKV and PyramidKV rows and any other row whose layers
// differ: one color per budget, one dash pattern per policy family.
std::string layer_budgets(const nlohmann::json& rows) {
  std::vector<Series> series;
  std::map<std::int64_t, std::size_t> budget_color;
  std::map<std::string, std::size_t> family_dash;
  for (const nlohmann::json& r : rows) {
    if (!r.contains("tokens_per_layer")) continue;
    const std::vector<double> t = r.at("tokens_per_layer").get<std::vector<double>>();
    const std::string policy = r.at("policy").get<std::string>();
    const bool uneven = !t.empty() && *std::max_element(t.begin(), t.end()) - *std::min_element(t.begin(), t.end()) > 0.5;
    if (family(policy) != "xkv" && family(policy) != "pyramidkv" && !uneven) continue;
    // The legend is narrow: family and budget (the whole spec is in the tables).
    const bool has_budget = r.contains("budget") && r.at("budget").is_number();
    const std::int64_t budget = has_budget ? r.at("budget").get<std::int64_t>() : -1;
    const std::string label = has_budget ? fmt::format("{} budget {}", family(policy), budget) : policy;
    const std::size_t color = budget_color.emplace(budget, budget_color.size()).first->second;
    const std::size_t dash = family_dash.emplace(family(policy), family_dash.size()).first->second;
    series.push_back({label, t, palette(color), dash_pattern(dash)});
  }
  if (series.empty()) return "<p>(no XKV, PyramidKV or other per-layer rows)</p>";
  return line_chart(series, 0.0, "layer", "tokens held per kv head (last step)", 1.0);
}

std::string heat_cell(double value, double top) {
  if (!std::isfinite(value)) return "<td>-</td>";
  const double v = top > 0 ? std::clamp(value / top, 0.0, 1.0) : 0.0;
  const int g = static_cast<int>(std::lround(80 + 150 * v)), r = static_cast<int>(std::lround(230 - 150 * v));
  return fmt::format(R"svg(<td style="background:rgb({},{},120)">{:.3f}</td>)svg", r, g, value);
}

// The rows whose kv heads hold different amounts (LeanKV, Ada-KV, DuoAttention): each (layer, kv
// head)'s bytes at the last step relative to full-fp16, as a heat map.
std::string head_memory(const nlohmann::json& rows) {
  std::string s;
  for (const nlohmann::json& r : rows) {
    const std::string policy = r.at("policy").get<std::string>();
    const std::string f = family(policy);
    if ((f != "leankv" && f != "adakv" && f != "duo") || !r.contains("bytes_vs_fp16_per_head")) continue;
    const auto heads = r.at("bytes_vs_fp16_per_head").get<std::vector<std::vector<double>>>();
    double top = 0.0;
    for (const auto& layer : heads) {
      for (const double b : layer) top = std::max(top, b);
    }
    s += fmt::format("<h3><code>{}</code></h3><table><tr><th>layer \\ kv head</th>", escape(policy));
    for (std::size_t k = 0; !heads.empty() && k < heads[0].size(); ++k) s += fmt::format("<th>{}</th>", k);
    s += "</tr>";
    for (std::size_t l = 0; l < heads.size(); ++l) {
      s += fmt::format("<tr><td>{}</td>", l);
      for (const double b : heads[l]) s += heat_cell(b, top);
      s += "</tr>";
    }
    s += "</table>";
  }
  return s.empty() ? "<p>(no LeanKV, Ada-KV or DuoAttention rows)</p>" : s;
}

// The reference's attention over the continuation, per (layer, kv head): the share of the context
// that holds 95% of the mass, and the mass on the first token, as two heat tables side by side.
std::string reference_attention(const nlohmann::json& report) {
  const nlohmann::json& ref = report.at("reference");
  if (!ref.contains("attention") || !ref.at("attention").is_array() || ref.at("attention").empty()) {
    return "<p>(no attention statistics)</p>";
  }
  std::map<std::int64_t, std::map<std::int64_t, const nlohmann::json*>> grid;  // layer -> kv head -> stats
  for (const nlohmann::json& h : ref.at("attention")) {
    grid[h.at("layer").get<std::int64_t>()][h.at("kv_head").get<std::int64_t>()] = &h;
  }
  std::int64_t heads = 0;
  for (const auto& [layer, row] : grid) heads = std::max<std::int64_t>(heads, static_cast<std::int64_t>(row.size()));
  std::string s = "<table><tr><th rowspan=\"2\">layer</th>";
  s += fmt::format("<th colspan=\"{0}\">share of the context holding 95% of the mass</th><th colspan=\"{0}\">mass on the first token</th></tr><tr>", heads);
  for (int part = 0; part < 2; ++part) {
    for (std::int64_t k = 0; k < heads; ++k) s += fmt::format("<th>kv head {}</th>", k);
  }
  s += "</tr>";
  for (const auto& [layer, row] : grid) {
    s += fmt::format("<tr><td>{}</td>", layer);
    for (const char* key : {"frac_for_95", "first_token_mass"}) {
      for (std::int64_t k = 0; k < heads; ++k) {
        const auto it = row.find(k);
        s += heat_cell(it == row.end() ? std::nan("") : num(*it->second, key), 1.0);
      }
    }
    s += "</tr>";
  }
  return s + "</table>";
}

// SpvLLM's slot strategies: the pool's internal fragmentation at each decode step.
std::string spvllm_fragmentation(const nlohmann::json& report) {
  if (!report.contains("spvllm_strategies") || report.at("spvllm_strategies").is_null()) return "<p>(spvllm not run)</p>";
  const nlohmann::json& sp = report.at("spvllm_strategies");
  std::vector<Series> series;
  for (const nlohmann::json& st : sp.at("strategies")) {
    series.push_back({st.at("strategy").get<std::string>(), st.at("fragmentation_by_step").get<std::vector<double>>()});
  }
  return fmt::format("<p class=\"note\">Budget {} tokens per head, H2O's decisions (the same accuracy for every strategy); "
                     "1 − live slots / allocated slots as each step's attention reads the pages, mean over the prompts.</p>",
                     sp.at("budget").get<std::int64_t>()) +
         line_chart(series, 1.0, "decode step", "internal fragmentation", 0.1);
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
  std::string s = fmt::format("# kvcheck accuracy report\n\nModel `{}` (hash {}), {}; reference perplexity {}.\n\n",
                              report.at("model").at("path").get<std::string>(), report.at("model").at("hash").get<std::string>(),
                              inputs_phrase(report, "x", ", "), perplexity_text(report));
  if (random_prompts(report)) s += random_prompts_note(report) + "\n\n";
  for (const std::string& note : fp8_saturation_notes(report)) s += note + "\n\n";
  for (const std::string& note : report_notes(report)) s += note + "\n\n";
  const nlohmann::json& ref = report.at("reference");
  if (ref.contains("attention") && ref.at("attention").is_array() && !ref.at("attention").empty()) {
    const nlohmann::json* sparse = nullptr;
    const nlohmann::json* sink = nullptr;
    for (const nlohmann::json& h : ref.at("attention")) {
      if (!sparse || num(h, "frac_for_95") < num(*sparse, "frac_for_95")) sparse = &h;
      if (!sink || num(h, "first_token_mass") > num(*sink, "first_token_mass")) sink = &h;
    }
    s += fmt::format("Reference attention over the continuation: the most concentrated kv head (layer {} head {}) holds 95% of "
                     "its mass in {:.1f}% of the context; the largest first-token mass is {:.3f} (layer {} head {}).\n\n",
                     sparse->at("layer").get<std::int64_t>(), sparse->at("kv_head").get<std::int64_t>(),
                     100.0 * num(*sparse, "frac_for_95"), num(*sink, "first_token_mass"), sink->at("layer").get<std::int64_t>(),
                     sink->at("kv_head").get<std::int64_t>());
  }
  s += "| policy | KV bytes vs fp16 | KL mean ± s.e. | KL p99 | KL max | top-1 | RMS Δp | ppl ratio | retrieval | oracle violations | wall s |\n";
  s += "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n";
  for (const nlohmann::json& r : report.at("rows")) {
    s += fmt::format("| `{}` | {} | {:.2e} ± {:.1e} | {:.2e} | {:.2e} | {:.4f} | {:.4f} | {:.4f} | {} | {} | {:.1f} |\n",
                     r.at("policy").get<std::string>(), bytes_text(r), num(r, "kl_mean"), num(r, "kl_stderr"),
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
h2{margin-top:28px}.note{color:#555;font-size:13px}.scroll{overflow-x:auto}
table.wide{font-size:11px}table.wide td{white-space:nowrap}table.wide td:first-child{white-space:normal;overflow-wrap:anywhere;max-width:260px}
</style></head><body>)svg";
  s += "<h1>kvcheck accuracy report</h1>";
  s += fmt::format(R"svg(<p class="note">Model <code>{}</code> (hash {}); {}; reference perplexity {}; command <code>{}</code>.</p>)svg",
                   escape(report.at("model").at("path").get<std::string>()), report.at("model").at("hash").get<std::string>(),
                   escape(inputs_phrase(report, "×", "; ")), perplexity_text(report),
                   escape(report.at("command").get<std::string>()));
  if (random_prompts(report)) s += "<p><strong>" + escape(random_prompts_note(report)) + "</strong></p>";
  for (const std::string& note : fp8_saturation_notes(report)) s += "<p><strong>" + escape(note) + "</strong></p>";
  for (const std::string& note : report_notes(report)) s += "<p><strong>" + escape(note) + "</strong></p>";
  s += "<h2>KV bytes against KL divergence</h2><p class=\"note\">Mean KL(P<sub>ref</sub> ‖ P<sub>engine</sub>) per position of the text prompts' continuations (log scale). Ringed points form the Pareto front: nothing holds fewer bytes at lower KL.</p>";
  FamilyMarks marks;
  s += scatter(rows, "kl_mean", "KL mean (log10)", true, true, marks);
  s += "<h2>KV bytes against retrieval accuracy</h2><p class=\"note\">Greedy exact match on the retrieval items; the front: nothing holds fewer bytes at higher accuracy.</p>";
  s += scatter(rows, "retrieval_accuracy", "retrieval exact match", false, false, marks);
  s += "<h2>KV bytes read per decode step against KL divergence</h2><p class=\"note\">The bytes the last decode step's attention read, relative to full-fp16 reading the whole context: the bytes held for every policy but Quest, which reads the pages it chooses and every page's key range. The front: nothing reads fewer bytes at lower KL.</p>";
  s += scatter(rows, "kl_mean", "KL mean (log10)", true, true, marks, "kv_bytes_read_vs_fp16",
               "KV bytes read per decode step relative to full-fp16");
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
    s += fmt::format("<tr><td>{}</td><td>{}</td>", escape(r.at("policy").get<std::string>()), bytes_text(r));
    for (const std::string& l : lengths) {
      const nlohmann::json& by = r.at("retrieval_accuracy_by_length");
      s += heat_cell(by.contains(l) ? by.at(l).get<double>() : std::nan(""), 1.0);
    }
    s += "</tr>";
  }
  s += "</table><h2>Per-layer budgets (XKV, PyramidKV)</h2><p class=\"note\">Tokens each layer's kv heads hold at the last decode step, mean over the text prompts.</p>";
  s += layer_budgets(rows);
  s += "<h2>Reference attention structure</h2><p class=\"note\">The reference's attention from the continuation's queries, "
       "mean over the query heads of each kv head and over the positions and prompts (darker green: larger). A head whose "
       "95% mass sits in a small share of the context leaves tokens to evict or quantize harder; a large first-token "
       "mass is an attention sink.</p>";
  s += reference_attention(report);
  s += "<h2>Per-head memory (LeanKV, Ada-KV, DuoAttention)</h2><p class=\"note\">Each kv head's bytes at the last decode step relative to full-fp16 holding the whole context (darker green: more bytes).</p>";
  s += head_memory(rows);
  s += "<h2>Fragmentation over time (SpvLLM's slot strategies)</h2>";
  s += spvllm_fragmentation(report);
  s += "<h2>Summary</h2><div class=\"scroll\"><table class=\"wide\"><tr><th>policy</th><th>bytes</th><th>KL mean</th><th>± s.e.</th><th>KL p99.9</th><th>p99</th><th>p95</th><th>p90</th><th>p50</th><th>max</th><th>top-1</th><th>RMS Δp</th><th>ppl ratio</th><th>retrieval</th><th>oracle checks</th><th>violations</th><th>wall s</th></tr>";
  for (const nlohmann::json& r : rows) {
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.2e}</td><td>{:.1e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.4f}</td><td>{:.4f}</td><td>{:.4f}</td><td>{}</td><td>{}</td><td>{}</td><td>{:.1f}</td></tr>",
                     escape(r.at("policy").get<std::string>()), bytes_text(r), num(r, "kl_mean"), num(r, "kl_stderr"),
                     num(r, "kl_p999"), num(r, "kl_p99"), num(r, "kl_p95"), num(r, "kl_p90"), num(r, "kl_p50"), num(r, "kl_max"),
                     num(r, "top1_agreement"), num(r, "rms_delta_p"), num(r, "perplexity_ratio"),
                     r.at("retrieval_accuracy").is_null() ? std::string("-") : fmt::format("{:.3f}", num(r, "retrieval_accuracy")),
                     r.at("oracle_checks").get<std::int64_t>(), r.at("oracle_violations").get<std::int64_t>(), num(r, "wall_s"));
  }
  s += "</table></div></body></html>\n";
  return s;
}

}  // namespace kvcheck::cli
