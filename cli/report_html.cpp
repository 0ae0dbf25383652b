#include "cli/report_html.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

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

// A policy's family: its name before the parameters (':') or a long report's budget fraction
// ('@', as in h2o@1/8).
std::string family(const std::string& policy) { return policy.substr(0, policy.find_first_of(":@")); }

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
  if (report.value("mode", "") == "long" && st.contains("lengths")) {
    std::vector<std::string> lengths;
    for (const nlohmann::json& l : st.at("lengths")) lengths.push_back(fmt::format("{}", l.get<std::int64_t>()));
    return fmt::format("{} held-out windows of each length {} {} tokens, the last {} decoded{}{} retrieval items in {} "
                       "lengths {} {} depths",
                       st.at("windows_per_length").get<std::int64_t>(), times, fmt::join(lengths, "/"),
                       st.at("continuation_tokens").get<std::int64_t>(), sep, st.at("retrieval_items").get<std::int64_t>(),
                       st.at("lengths").size(), times, st.at("depths").size());
  }
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
  double x0, x1, y0, y1;
  bool log_y = false;
  // The picture's size and margins (R holds the legend); P: inner padding, so that a point or line
  // at the edge of the data range stays clear of the frame.
  double W = 720, H = 420, L = 70, R = 200, T = 20, B = 50, P = 6;

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
    return s + y_ticks_and_titles(x_label, y_label);
  }
  // The opening <svg> and the frame of a categorical x axis: one evenly spaced tick per label at
  // x = 0, 1, ... (x0 = 0, x1 = labels - 1).
  std::string open_categorical(const std::vector<std::string>& labels, const std::string& x_label,
                               const std::string& y_label) const {
    std::string s = fmt::format(R"svg(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img" font-family="sans-serif" font-size="11">)svg", W, H);
    s += fmt::format(R"svg(<rect x="{}" y="{}" width="{}" height="{}" fill="#fafafa" stroke="#999"/>)svg", L, T, W - L - R, H - T - B);
    for (std::size_t i = 0; i < labels.size(); ++i) {
      const double x = px(static_cast<double>(i));
      s += fmt::format(R"svg(<line x1="{0:.1f}" x2="{0:.1f}" y1="{1}" y2="{2}" stroke="#ddd"/><text x="{0:.1f}" y="{3}" text-anchor="middle">{4}</text>)svg",
                       x, T, H - B, H - B + 15, escape(labels[i]));
    }
    return s + y_ticks_and_titles(x_label, y_label);
  }
  // Grid lines and labels of the y axis (one per power of ten when log_y), and both axis titles.
  std::string y_ticks_and_titles(const std::string& x_label, const std::string& y_label) const {
    std::string s;
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
                   a.W - a.R + 8, a.W - a.R + 22, a.T + 16 + 15 * row, a.W - a.R + 26, a.T + 20 + 15 * row);
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


// ---- kvcheck report --long: context position and retrieval depth (docs/reports.md, "The long
// report"). Drawn only when report.json's "mode" is "long"; every other report is unchanged.

bool long_report(const nlohmann::json& report) {
  return report.contains("mode") && report.at("mode").is_string() && report.at("mode").get<std::string>() == "long";
}

// position_bins' labels, in order.
std::vector<std::string> position_bin_labels(const nlohmann::json& report) {
  std::vector<std::string> labels;
  if (report.contains("position_bins") && report.at("position_bins").is_array()) {
    for (const nlohmann::json& b : report.at("position_bins")) labels.push_back(b.at("label").get<std::string>());
  }
  return labels;
}

// The entry of `holder`'s by_position for the bin `label` (a row's or the reference's), or null
// where the bin is missing.
const nlohmann::json* position_entry(const nlohmann::json& holder, const std::string& label) {
  if (!holder.contains("by_position") || !holder.at("by_position").is_array()) return nullptr;
  for (const nlohmann::json& e : holder.at("by_position")) {
    if (e.is_object() && e.contains("label") && e.at("label").is_string() && e.at("label").get<std::string>() == label) return &e;
  }
  return nullptr;
}

double position_value(const nlohmann::json& holder, const std::string& label, const char* key) {
  const nlohmann::json* e = position_entry(holder, label);
  return e ? num(*e, key) : std::nan("");
}

// A number or "-" where there is none.
std::string fixed_or_dash(double v, const char* spec) {
  return std::isfinite(v) ? fmt::format(fmt::runtime(spec), v) : std::string("-");
}

// `label` cut to `chars` characters (an ellipsis marks the cut; the whole name is in a <title>).
std::string clip(const std::string& label, std::size_t chars) {
  return label.size() <= chars ? label : label.substr(0, chars - 1) + "\u2026";
}

// A long-mode row's budget fraction ("1/8"), or "" for a policy without one.
std::string budget_fraction(const nlohmann::json& row) {
  return row.contains("budget_fraction") && row.at("budget_fraction").is_string() ? row.at("budget_fraction").get<std::string>()
                                                                                 : std::string();
}

double fraction_value(const std::string& f) {
  const std::size_t slash = f.find('/');
  try {
    return slash == std::string::npos ? std::stod(f) : std::stod(f.substr(0, slash)) / std::stod(f.substr(slash + 1));
  } catch (const std::exception&) {
    return 0.0;
  }
}

// The retrieval grid's axes: context lengths (rows) and needle depths in percent (columns).
struct RetrievalAxes {
  std::vector<std::int64_t> lengths, depths;
};
RetrievalAxes retrieval_axes(const nlohmann::json& report) {
  RetrievalAxes ax;
  if (report.contains("retrieval_grid") && report.at("retrieval_grid").is_object()) {
    ax.lengths = report.at("retrieval_grid").at("lengths").get<std::vector<std::int64_t>>();
    ax.depths = report.at("retrieval_grid").at("depths").get<std::vector<std::int64_t>>();
  }
  return ax;
}

// Cell (l, d) of a [length][depth] grid of numbers or nulls; NaN where null or absent.
double grid_cell(const nlohmann::json* grid, std::size_t l, std::size_t d) {
  if (!grid || !grid->is_array() || l >= grid->size() || !grid->at(l).is_array() || d >= grid->at(l).size()) return std::nan("");
  const nlohmann::json& c = grid->at(l).at(d);
  return c.is_number() ? c.get<double>() : std::nan("");
}

const nlohmann::json* row_grid(const nlohmann::json& row, const char* key) {
  if (!row.contains("retrieval_grid") || !row.at("retrieval_grid").is_object()) return nullptr;
  const nlohmann::json& g = row.at("retrieval_grid");
  return g.contains(key) ? &g.at(key) : nullptr;
}

// The items per cell: the rows' (every row runs the same items), for weighting the reference's grid.
const nlohmann::json* items_grid(const nlohmann::json& rows) {
  for (const nlohmann::json& r : rows) {
    if (const nlohmann::json* g = row_grid(r, "items")) return g;
  }
  return nullptr;
}

// The mean of a grid's cells over length l (or every length when l < 0), weighted by the items per
// cell (unweighted without them); NaN when no cell has a value.
double grid_mean(const nlohmann::json* grid, const nlohmann::json* items, const RetrievalAxes& ax, std::ptrdiff_t l) {
  double sum = 0.0, weight = 0.0;
  for (std::size_t li = 0; li < ax.lengths.size(); ++li) {
    if (l >= 0 && li != static_cast<std::size_t>(l)) continue;
    for (std::size_t d = 0; d < ax.depths.size(); ++d) {
      const double v = grid_cell(grid, li, d);
      if (!std::isfinite(v)) continue;
      const double n = items ? grid_cell(items, li, d) : 1.0;
      const double w = std::isfinite(n) ? n : 1.0;
      sum += w * v;
      weight += w;
    }
  }
  return weight > 0.0 ? sum / weight : std::nan("");
}

std::string length_label(std::int64_t length) {
  return length >= 1024 && length % 1024 == 0 ? fmt::format("{}K", length / 1024) : fmt::format("{}", length);
}

// Mean KL per context position bin, one line per row (its family's color and point mark, a dash
// pattern per row of one family), on a log axis shared by every chart. One chart per budget
// fraction (the policies that keep every token first), at most kMaxLines lines each, so that 40-60
// rows stay readable: within one chart the families compare at the same share of the context.
std::string kl_by_position_charts(const nlohmann::json& report, FamilyMarks& marks) {
  const nlohmann::json& rows = report.at("rows");
  const std::vector<std::string> bins = position_bin_labels(report);
  if (bins.empty()) return "<p>(no position bins)</p>";
  // One log axis for the budgeted charts and one for the chart of policies that keep every token,
  // so that charts of one kind compare at a glance; at most six decades each: full-fp32's KL
  // (about 1e-13, rounding) would squeeze every other line into the top of the chart. A value below
  // the floor is drawn on it as a hollow mark (its <title> keeps the value).
  const auto kl_range = [&](bool budgeted) {
    double lo = INFINITY, hi = -INFINITY;
    for (const nlohmann::json& r : rows) {
      if (budget_fraction(r).empty() == budgeted) continue;
      for (const std::string& b : bins) {
        const double kl = position_value(r, b, "kl_mean");
        if (std::isfinite(kl) && kl > 0.0) {
          lo = std::min(lo, std::log10(kl));
          hi = std::max(hi, std::log10(kl));
        }
      }
    }
    if (!std::isfinite(lo)) return std::pair(0.0, 0.0);
    hi = std::ceil(hi);
    lo = std::max(std::floor(lo), hi - 6.0);
    return std::pair(lo, std::max(hi, lo + 1.0));
  };
  const std::pair<double, double> kept_range = kl_range(false), budgeted_range = kl_range(true);
  if (kept_range.first == kept_range.second && budgeted_range.first == budgeted_range.second) {
    return "<p>(no row has a positive KL by position)</p>";
  }
  // The groups: "" (every token kept) first, then the fractions from the smallest.
  std::vector<std::string> groups;
  for (const nlohmann::json& r : rows) {
    const std::string f = budget_fraction(r);
    if (std::find(groups.begin(), groups.end(), f) == groups.end()) groups.push_back(f);
  }
  std::stable_sort(groups.begin(), groups.end(), [](const std::string& a, const std::string& b) {
    if (a.empty() != b.empty()) return a.empty();
    return fraction_value(a) < fraction_value(b);
  });
  constexpr std::size_t kMaxLines = 14;
  std::string s = R"(<div style="display:flex;flex-wrap:wrap;gap:8px">)";
  for (const std::string& g : groups) {
    std::vector<std::size_t> members;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (budget_fraction(rows[i]) == g) members.push_back(i);
    }
    const std::size_t parts = (members.size() + kMaxLines - 1) / kMaxLines;
    for (std::size_t part = 0; part < parts; ++part) {
      const std::size_t first = part * members.size() / parts, last = (part + 1) * members.size() / parts;
      const auto [lo, hi] = g.empty() ? kept_range : budgeted_range;
      Axes a{-0.4, static_cast<double>(bins.size()) - 0.6, lo, hi, true};
      a.W = 590, a.H = 330, a.L = 58, a.R = 190, a.T = 16, a.B = 44;
      std::string title = g.empty() ? "every token kept (quantization, mixed precision)"
                                    : fmt::format("budget {} of the context", g);
      if (parts > 1) title += fmt::format(" ({} of {})", part + 1, parts);
      s += fmt::format(R"(<div><div style="font-size:13px;font-weight:bold;margin:4px 0">{}</div>)", escape(title));
      s += a.open_categorical(bins, "decode position in the window", "KL mean (log10)");
      std::map<std::string, std::size_t> per_family;
      for (std::size_t k = first; k < last; ++k) {
        const nlohmann::json& r = rows[members[k]];
        const std::string policy = r.at("policy").get<std::string>();
        const FamilyMark mark = marks.of(family(policy));
        static const char* dashes[] = {"none", "7,4", "2,3", "10,3,2,3", "4,2", "1,4"};
        const char* dash = dashes[per_family[family(policy)]++ % std::size(dashes)];
        std::string d, points;
        bool pen_down = false;
        for (std::size_t b = 0; b < bins.size(); ++b) {
          const double kl = position_value(r, bins[b], "kl_mean");
          if (!std::isfinite(kl) || kl <= 0.0) {
            pen_down = false;  // a gap: the missing bin is not bridged
            continue;
          }
          const bool below = std::log10(kl) < lo;
          const double x = a.px(static_cast<double>(b)), y = a.py(std::max(lo, std::log10(kl)));
          d += fmt::format("{}{:.1f},{:.1f} ", pen_down ? "L" : "M", x, y);
          pen_down = true;
          const std::string tip = fmt::format("<title>{}, {}: KL {:.3g}{}</title>", escape(policy), escape(bins[b]), kl,
                                              below ? " (below the axis)" : "");
          points += below ? point_mark({"#fff", mark.shape}, x, y, 3.5, mark.color, 1.2, tip)
                          : point_mark(mark, x, y, 3.5, "none", 0, tip);
        }
        if (!d.empty()) d.pop_back();
        s += fmt::format(R"svg(<path class="kl-line" data-policy="{0}" d="{1}" fill="none" stroke="{2}" stroke-width="1.6" stroke-dasharray="{3}"><title>{0}</title></path>)svg",
                         escape(policy), d, mark.color, dash);
        s += points;
        // Legend: the line in its dash pattern with the point mark, and the name without
        // "@fraction"; a row that keeps every token by the spec it was asked for, which names only
        // what differs from the policy's defaults ("kivi2:rotate=hadamard", where the policy's
        // name spells every parameter and is cut before the one that tells two rows apart).
        const int row = static_cast<int>(k - first);
        const double ly = a.T + 12 + 15 * row;
        const bool has_spec = r.contains("spec") && r.at("spec").is_string();
        std::string name = !g.empty() ? policy.substr(0, policy.rfind('@')) : has_spec ? r.at("spec").get<std::string>() : policy;
        s += fmt::format(R"svg(<line x1="{}" x2="{}" y1="{}" y2="{}" stroke="{}" stroke-width="1.6" stroke-dasharray="{}"/>)svg",
                         a.W - a.R + 4, a.W - a.R + 26, ly - 4, ly - 4, mark.color, dash);
        s += point_mark(mark, a.W - a.R + 15, ly - 4, 3.5, "none", 0, "");
        s += fmt::format(R"svg(<text x="{}" y="{}">{}<title>{}</title></text>)svg", a.W - a.R + 30, ly, escape(clip(name, 25)),
                         escape(policy));
      }
      s += "</svg></div>";
    }
  }
  return s + "</div>";
}

// KL mean, top-1 agreement and perplexity ratio per row and position bin, under the reference's
// perplexity and token count per bin.
std::string position_table(const nlohmann::json& report) {
  const std::vector<std::string> bins = position_bin_labels(report);
  const nlohmann::json& ref = report.at("reference");
  std::string s = R"(<div class="scroll"><table class="wide"><tr><th rowspan="2">policy</th>)";
  for (const std::string& b : bins) {
    s += fmt::format(R"(<th colspan="3">{} (ref. ppl {}, {} tokens)</th>)", escape(b),
                     fixed_or_dash(position_value(ref, b, "perplexity"), "{:.3f}"),
                     fixed_or_dash(position_value(ref, b, "tokens"), "{:.0f}"));
  }
  s += "</tr><tr>";
  for (std::size_t b = 0; b < bins.size(); ++b) s += "<th>KL mean</th><th>top-1</th><th>ppl ratio</th>";
  s += "</tr>";
  for (const nlohmann::json& r : report.at("rows")) {
    s += fmt::format("<tr><td>{}</td>", escape(r.at("policy").get<std::string>()));
    for (const std::string& b : bins) {
      s += fmt::format("<td>{}</td><td>{}</td><td>{}</td>", fixed_or_dash(position_value(r, b, "kl_mean"), "{:.2e}"),
                       fixed_or_dash(position_value(r, b, "top1_agreement"), "{:.4f}"),
                       fixed_or_dash(position_value(r, b, "perplexity_ratio"), "{:.4f}"));
    }
    s += "</tr>";
  }
  return s + "</table></div>";
}

// An exact-match fraction as short as a small cell holds it: 0, 1, or .67.
std::string short_fraction(double v) {
  if (v <= 0.0) return "0";
  if (v >= 1.0) return "1";
  std::string t = fmt::format("{:.2f}", v);
  return t.substr(t.find('.'));
}

// heat_cell's colors: red at 0, green at 1.
std::string heat_fill(double v) {
  v = std::clamp(v, 0.0, 1.0);
  return fmt::format("rgb({},{},120)", static_cast<int>(std::lround(230 - 150 * v)), static_cast<int>(std::lround(80 + 150 * v)));
}

// One small heat map of exact match: context lengths as rows, needle depths as columns, the value
// in each cell's <title> (and as text), "no item" where the grid has none.
std::string retrieval_heat_map(const std::string& name, const std::string& subtitle, const nlohmann::json* exact,
                               const nlohmann::json* agreement, const nlohmann::json* items, const RetrievalAxes& ax) {
  constexpr double cw = 20, ch = 16, left = 30, top = 44;
  const double w = left + cw * static_cast<double>(ax.depths.size()) + 6, h = top + ch * static_cast<double>(ax.lengths.size()) + 4;
  std::string s = fmt::format(R"svg(<svg class="heat" xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" role="img" font-family="sans-serif" font-size="9">)svg", w, h);
  s += fmt::format(R"svg(<text x="2" y="12" font-size="11" font-weight="bold">{}<title>{}</title></text>)svg",
                   escape(clip(name, static_cast<std::size_t>(w / 6.5))), escape(name));
  s += fmt::format(R"svg(<text x="2" y="25" font-size="10" fill="#555">{}</text>)svg", escape(subtitle));
  for (std::size_t d = 0; d < ax.depths.size(); d += 2) {
    s += fmt::format(R"svg(<text x="{:.1f}" y="{}" text-anchor="middle" fill="#555">{}</text>)svg", left + cw * (static_cast<double>(d) + 0.5),
                     top - 4, ax.depths[d]);
  }
  for (std::size_t l = 0; l < ax.lengths.size(); ++l) {
    const double y = top + ch * static_cast<double>(l);
    s += fmt::format(R"svg(<text x="{}" y="{:.1f}" text-anchor="end" fill="#555">{}</text>)svg", left - 3, y + ch - 4,
                     length_label(ax.lengths[l]));
    for (std::size_t d = 0; d < ax.depths.size(); ++d) {
      const double x = left + cw * static_cast<double>(d);
      const double v = grid_cell(exact, l, d);
      const std::string where = fmt::format("{}: length {}, depth {}%", name, ax.lengths[l], ax.depths[d]);
      if (!std::isfinite(v)) {
        s += fmt::format(R"svg(<rect class="cell" x="{:.1f}" y="{:.1f}" width="{}" height="{}" fill="#eee" stroke="#fff"><title>{}: no item</title></rect>)svg",
                         x, y, cw, ch, escape(where));
        continue;
      }
      std::string tip = fmt::format("{}: exact {:.3f}", where, v);
      const double a = grid_cell(agreement, l, d), n = grid_cell(items, l, d);
      if (std::isfinite(a)) tip += fmt::format(", agreement {:.3f}", a);
      if (std::isfinite(n)) tip += fmt::format(", {:.0f} items", n);
      s += fmt::format(R"svg(<rect class="cell" x="{:.1f}" y="{:.1f}" width="{}" height="{}" fill="{}" stroke="#fff"><title>{}</title></rect>)svg",
                       x, y, cw, ch, heat_fill(v), escape(tip));
      const std::string text = short_fraction(v);
      if (static_cast<double>(text.size()) * 5.5 <= cw - 2) {  // about 5.5 px per character at 9 px
        s += fmt::format(R"svg(<text x="{:.1f}" y="{:.1f}" text-anchor="middle" pointer-events="none">{}</text>)svg",
                         x + cw / 2, y + ch - 4, text);
      }
    }
  }
  return s + "</svg>";
}

// The reference's retrieval grid first, then one heat map per row, then a table of exact match and
// agreement per length.
std::string retrieval_grids(const nlohmann::json& report) {
  const nlohmann::json& rows = report.at("rows");
  const RetrievalAxes ax = retrieval_axes(report);
  if (ax.lengths.empty() || ax.depths.empty()) return "<p>(no retrieval grid)</p>";
  const nlohmann::json* items = items_grid(rows);
  const nlohmann::json& ref = report.at("reference");
  const nlohmann::json* ref_exact = ref.contains("retrieval_exact") ? &ref.at("retrieval_exact") : nullptr;
  std::string s = R"(<div style="display:flex;flex-wrap:wrap;gap:10px 14px">)";
  s += retrieval_heat_map("full precision (reference)",
                          fmt::format("exact {}", fixed_or_dash(grid_mean(ref_exact, items, ax, -1), "{:.3f}")), ref_exact,
                          nullptr, items, ax);
  for (const nlohmann::json& r : rows) {
    const std::string sub = fmt::format("exact {}, agreement {}", fixed_or_dash(num(r, "retrieval_accuracy"), "{:.3f}"),
                                        fixed_or_dash(num(r, "retrieval_agreement"), "{:.3f}"));
    s += retrieval_heat_map(r.at("policy").get<std::string>(), sub, row_grid(r, "exact"), row_grid(r, "agreement"),
                            row_grid(r, "items"), ax);
  }
  s += "</div>";
  // The table: exact / agreement per length and overall.
  s += R"(<h3>Exact match and agreement by length</h3><div class="scroll"><table class="wide"><tr><th rowspan="2">policy</th><th rowspan="2">items</th>)";
  for (const std::int64_t l : ax.lengths) s += fmt::format(R"(<th colspan="2">{} tokens</th>)", l);
  s += R"(<th colspan="2">overall</th></tr><tr>)";
  for (std::size_t l = 0; l <= ax.lengths.size(); ++l) s += "<th>exact</th><th>agreement</th>";
  s += "</tr>";
  const auto table_row = [&](const std::string& name, const std::string& n, const nlohmann::json* exact,
                             const nlohmann::json* agreement, double overall_exact, double overall_agreement) {
    std::string t = fmt::format("<tr><td>{}</td><td>{}</td>", escape(name), n);
    for (std::size_t l = 0; l < ax.lengths.size(); ++l) {
      t += heat_cell(grid_mean(exact, items, ax, static_cast<std::ptrdiff_t>(l)), 1.0);
      t += agreement ? heat_cell(grid_mean(agreement, items, ax, static_cast<std::ptrdiff_t>(l)), 1.0) : "<td>-</td>";
    }
    t += heat_cell(overall_exact, 1.0);
    t += agreement ? heat_cell(overall_agreement, 1.0) : "<td>-</td>";
    return t + "</tr>";
  };
  const double ref_items = [&] {
    double n = 0.0;
    for (std::size_t l = 0; l < ax.lengths.size(); ++l) {
      for (std::size_t d = 0; d < ax.depths.size(); ++d) {
        const double c = grid_cell(items, l, d);
        if (std::isfinite(c)) n += c;
      }
    }
    return n;
  }();
  s += table_row("full precision (reference)", items ? fmt::format("{:.0f}", ref_items) : std::string("-"), ref_exact, nullptr,
                 grid_mean(ref_exact, items, ax, -1), std::nan(""));
  for (const nlohmann::json& r : rows) {
    const std::string n = r.contains("retrieval_items") && r.at("retrieval_items").is_number()
                              ? fmt::format("{}", r.at("retrieval_items").get<std::int64_t>())
                              : std::string("-");
    s += table_row(r.at("policy").get<std::string>(), n, row_grid(r, "exact"), row_grid(r, "agreement"),
                   num(r, "retrieval_accuracy"), num(r, "retrieval_agreement"));
  }
  return s + "</table></div>";
}

// The sweep report's retrieval exact match per prompt length, a row per policy.
std::string retrieval_by_length_html(const nlohmann::json& rows) {
  std::vector<std::string> lengths;
  for (const nlohmann::json& r : rows) {
    for (const auto& [len, unused] : r.at("retrieval_accuracy_by_length").items()) {
      if (std::find(lengths.begin(), lengths.end(), len) == lengths.end()) lengths.push_back(len);
    }
  }
  std::sort(lengths.begin(), lengths.end(), [](const std::string& a, const std::string& b) { return std::stoll(a) < std::stoll(b); });
  std::string s = "<h2>Retrieval accuracy by context length</h2><table><tr><th>policy</th><th>bytes</th>";
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
  return s + "</table>";
}

// The HTML sections of a long report.
std::string long_sections_html(const nlohmann::json& report, FamilyMarks& marks) {
  std::string s = "<h2>KL by context position</h2><p class=\"note\">Mean KL(P<sub>ref</sub> ‖ P<sub>engine</sub>) of the "
                  "decode positions in each bin (log scale; the windows of each length contribute the positions they "
                  "decode). One chart per budget fraction, each line one row in its family's color and mark; a gap is a "
                  "bin the row has no position in, a hollow mark a value below the axis. Hover a point for its value.</p>";
  s += kl_by_position_charts(report, marks);
  s += "<h3>KL, top-1 and perplexity ratio by position</h3>";
  s += position_table(report);
  s += "<h2>Retrieval by length and depth</h2><p class=\"note\">Greedy exact match per context length (rows) and needle "
       "depth in percent of the context (columns; labelled every other), the full-precision reference's own grid first "
       "(<span style=\"background:rgb(230,80,120)\">&nbsp;0&nbsp;</span> to "
       "<span style=\"background:rgb(80,230,120)\">&nbsp;1&nbsp;</span>; gray: no item). Agreement: the greedy answer "
       "equals the full-precision model's own greedy answer, right or wrong. Hover a cell for its values.</p>";
  s += retrieval_grids(report);
  return s;
}

// report.md's long tables: KL / top-1 per position bin, exact / agreement per length.
std::string long_sections_markdown(const nlohmann::json& report) {
  const nlohmann::json& rows = report.at("rows");
  const std::vector<std::string> bins = position_bin_labels(report);
  const nlohmann::json& ref = report.at("reference");
  std::string s = "\n## KL by context position\n\nKL mean / top-1 agreement over the decode positions in each bin. Reference perplexity by position:";
  for (std::size_t b = 0; b < bins.size(); ++b) {
    s += fmt::format("{} {} {} ({} tokens)", b == 0 ? "" : ";", bins[b], fixed_or_dash(position_value(ref, bins[b], "perplexity"), "{:.3f}"),
                     fixed_or_dash(position_value(ref, bins[b], "tokens"), "{:.0f}"));
  }
  s += ".\n\n| policy |";
  for (const std::string& b : bins) s += fmt::format(" {} |", b);
  s += "\n| --- |";
  for (std::size_t b = 0; b < bins.size(); ++b) s += " --- |";
  s += "\n";
  for (const nlohmann::json& r : rows) {
    s += fmt::format("| `{}` |", r.at("policy").get<std::string>());
    for (const std::string& b : bins) {
      const double kl = position_value(r, b, "kl_mean"), top1 = position_value(r, b, "top1_agreement");
      s += position_entry(r, b) ? fmt::format(" {} / {} |", fixed_or_dash(kl, "{:.2e}"), fixed_or_dash(top1, "{:.4f}")) : " - |";
    }
    s += "\n";
  }
  const RetrievalAxes ax = retrieval_axes(report);
  if (ax.lengths.empty()) return s;
  const nlohmann::json* items = items_grid(rows);
  const nlohmann::json* ref_exact = ref.contains("retrieval_exact") ? &ref.at("retrieval_exact") : nullptr;
  s += "\n## Retrieval by length\n\nExact match / agreement (the greedy answer equals the full-precision model's own) per "
       "context length, over every needle depth.\n\n| policy |";
  for (const std::int64_t l : ax.lengths) s += fmt::format(" {} |", l);
  s += " overall |\n| --- |";
  for (std::size_t l = 0; l <= ax.lengths.size(); ++l) s += " --- |";
  s += "\n| full precision (reference) |";
  for (std::size_t l = 0; l < ax.lengths.size(); ++l) {
    s += fmt::format(" {} / - |", fixed_or_dash(grid_mean(ref_exact, items, ax, static_cast<std::ptrdiff_t>(l)), "{:.3f}"));
  }
  s += fmt::format(" {} / - |\n", fixed_or_dash(grid_mean(ref_exact, items, ax, -1), "{:.3f}"));
  for (const nlohmann::json& r : rows) {
    s += fmt::format("| `{}` |", r.at("policy").get<std::string>());
    for (std::size_t l = 0; l < ax.lengths.size(); ++l) {
      const auto li = static_cast<std::ptrdiff_t>(l);
      s += fmt::format(" {} / {} |", fixed_or_dash(grid_mean(row_grid(r, "exact"), items, ax, li), "{:.3f}"),
                       fixed_or_dash(grid_mean(row_grid(r, "agreement"), items, ax, li), "{:.3f}"));
    }
    s += fmt::format(" {} / {} |\n", fixed_or_dash(num(r, "retrieval_accuracy"), "{:.3f}"),
                     fixed_or_dash(num(r, "retrieval_agreement"), "{:.3f}"));
  }
  return s;
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
  if (long_report(report)) s += long_sections_markdown(report);
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
  if (long_report(report)) {
    s += long_sections_html(report, marks);  // its retrieval grid ends with the table by length
  } else {
    s += retrieval_by_length_html(rows);
  }
  s += "<h2>Per-layer budgets (XKV, PyramidKV)</h2><p class=\"note\">Tokens each layer's kv heads hold at the last decode step, mean over the text prompts.</p>";
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
  s += "<h2>Summary</h2><div class=\"scroll\"><table class=\"wide\"><tr><th>policy</th><th>bytes</th><th>KL mean</th><th>± s.e.</th><th>KL p99.9</th><th>p99</th><th>p95</th><th>p90</th><th>p50</th><th>max</th><th>top-1</th><th>RMS Δp</th><th>ppl ratio</th><th>retrieval</th>";
  // A long report adds the retrieval agreement (the greedy answer equals the reference's own).
  const bool long_mode = long_report(report);
  if (long_mode) s += "<th>agreement</th>";
  s += "<th>oracle checks</th><th>violations</th><th>wall s</th></tr>";
  for (const nlohmann::json& r : rows) {
    s += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.2e}</td><td>{:.1e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.2e}</td><td>{:.4f}</td><td>{:.4f}</td><td>{:.4f}</td><td>{}</td>",
                     escape(r.at("policy").get<std::string>()), bytes_text(r), num(r, "kl_mean"), num(r, "kl_stderr"),
                     num(r, "kl_p999"), num(r, "kl_p99"), num(r, "kl_p95"), num(r, "kl_p90"), num(r, "kl_p50"), num(r, "kl_max"),
                     num(r, "top1_agreement"), num(r, "rms_delta_p"), num(r, "perplexity_ratio"),
                     r.at("retrieval_accuracy").is_null() ? std::string("-") : fmt::format("{:.3f}", num(r, "retrieval_accuracy")));
    if (long_mode) s += fmt::format("<td>{}</td>", fixed_or_dash(num(r, "retrieval_agreement"), "{:.3f}"));
    s += fmt::format("<td>{}</td><td>{}</td><td>{:.1f}</td></tr>", r.at("oracle_checks").get<std::int64_t>(),
                     r.at("oracle_violations").get<std::int64_t>(), num(r, "wall_s"));
  }
  s += "</table></div></body></html>\n";
  return s;
}

}  // namespace kvcheck::cli
