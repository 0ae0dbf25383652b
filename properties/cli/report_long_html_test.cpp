// kvcheck report --long's pages (docs/reports.md, "The long report"): the KL-by-position chart
// draws one line per row through its bins in order, higher KL higher up; every row's retrieval
// heat map has a cell per (length, depth) with its value in the tooltip and "no item" where the
// grid has none; a row named SPEC@FRACTION shares its family's mark; the Markdown tables hold the
// numbers; and a report without "mode": "long" shows none of it.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/report_html.h"
#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck::cli {
namespace {

const std::vector<std::string> kBins = {"0-1K", "1-2K", "2-4K", "4-8K"};
const std::vector<int> kLengths = {1024, 2048, 4096, 8192};

// A cell's exact match, distinct per (row, length, depth) so that a title can be traced back.
double exact_at(int row, std::size_t l, std::size_t d) { return std::round(1000.0 * (0.05 * row + 0.2 * static_cast<double>(l) + 0.01 * static_cast<double>(d))) / 1000.0; }

// A long row: KL per bin (NaN: the bin is missing, a null entry), its 4 x 11 retrieval grid.
nlohmann::json long_row(int index, const std::string& policy, const nlohmann::json& fraction, const std::vector<double>& kl) {
  nlohmann::json by_position = nlohmann::json::array();
  for (std::size_t b = 0; b < kBins.size(); ++b) {
    if (std::isnan(kl[b])) {
      by_position.push_back(nullptr);
      continue;
    }
    by_position.push_back({{"label", kBins[b]},
                           {"kl_mean", kl[b]},
                           {"kl_p99", 10 * kl[b]},
                           {"top1_agreement", 0.9 - 0.01 * static_cast<double>(b) - 0.001 * index},
                           {"perplexity_ratio", 1.0 + kl[b]},
                           {"tokens", 64},
                           {"kv_bytes_vs_fp16", 0.125}});
  }
  nlohmann::json exact = nlohmann::json::array(), agreement = nlohmann::json::array(), items = nlohmann::json::array();
  for (std::size_t l = 0; l < kLengths.size(); ++l) {
    nlohmann::json e = nlohmann::json::array(), a = nlohmann::json::array(), n = nlohmann::json::array();
    for (std::size_t d = 0; d <= 10; ++d) {
      const bool none = l == 0 && d == 10;  // the 1024-token window has no item at depth 100%
      e.push_back(none ? nlohmann::json(nullptr) : nlohmann::json(exact_at(index, l, d)));
      a.push_back(none ? nlohmann::json(nullptr) : nlohmann::json(0.5));
      n.push_back(none ? 0 : 2);
    }
    exact.push_back(e);
    agreement.push_back(a);
    items.push_back(n);
  }
  return {{"policy", policy},
          {"spec", policy},
          {"budget", nullptr},
          {"budget_fraction", fraction},
          {"kl_mean", 1e-3},
          {"kl_p99", 1e-2},
          {"top1_agreement", 0.9},
          {"perplexity", 12.0},
          {"perplexity_ratio", 1.01},
          {"kv_bytes_vs_fp16", 0.125},
          {"kv_bytes_read_vs_fp16", 0.125},
          {"retrieval_items", 86},
          {"retrieval_accuracy", 0.625},
          {"retrieval_accuracy_by_length", {{"1024", 0.5}, {"8192", 0.75}}},
          {"retrieval_accuracy_by_task", {{"needle", 0.625}}},
          {"retrieval_agreement", 0.8125},
          {"by_position", by_position},
          {"retrieval_grid", {{"exact", exact}, {"agreement", agreement}, {"items", items}}},
          {"oracle_checks", 10},
          {"oracle_violations", 0},
          {"wall_s", 1.0}};
}

const double kNan = std::nan("");

nlohmann::json long_report() {
  nlohmann::json bins = nlohmann::json::array(), ref_bins = nlohmann::json::array(), ref_exact = nlohmann::json::array();
  for (std::size_t b = 0; b < kBins.size(); ++b) {
    bins.push_back({{"label", kBins[b]}, {"from", b == 0 ? 0 : 512 << b}, {"to", 1024 << b}});
    ref_bins.push_back({{"label", kBins[b]}, {"perplexity", 12.5 - static_cast<double>(b)}, {"tokens", 64}});
  }
  for (std::size_t l = 0; l < kLengths.size(); ++l) {
    nlohmann::json e = nlohmann::json::array();
    for (std::size_t d = 0; d <= 10; ++d) e.push_back(l == 0 && d == 10 ? nlohmann::json(nullptr) : nlohmann::json(1.0));
    ref_exact.push_back(e);
  }
  nlohmann::json depths = nlohmann::json::array();
  for (int d = 0; d <= 100; d += 10) depths.push_back(d);
  return {{"format", "kvcheck-report"},
          {"version", 1},
          {"mode", "long"},
          {"command", "kvcheck report --long"},
          {"model", {{"path", "m"}, {"hash", "0"}}},
          {"settings", {{"prompts", 4}, {"prompt_tokens", 8128}, {"continuation_tokens", 64}, {"retrieval_items", 86}}},
          {"position_bins", bins},
          {"retrieval_grid", {{"lengths", kLengths}, {"depths", depths}}},
          {"reference", {{"perplexity", 12.0}, {"by_position", ref_bins}, {"retrieval_exact", ref_exact}}},
          {"rows",
           {long_row(0, "h2o@1/8", "1/8", {1e-3, 2e-3, 4e-3, 8e-3}),
            long_row(1, "h2o@1/4", "1/4", {5e-4, 1e-3, 3e-3, 2e-3}),
            long_row(2, "snapkv@1/8", "1/8", {2e-4, 3e-4, kNan, 6e-4}),
            long_row(3, "kv-bits:k=4,v=8", nullptr, {1.2e-2, 1.1e-2, 1.3e-2, 1.5e-2})}},
          {"spvllm_strategies", nullptr}};
}

std::vector<double> kl_of(const nlohmann::json& row) {
  std::vector<double> kl;
  for (const nlohmann::json& e : row.at("by_position")) kl.push_back(e.is_null() ? kNan : e.at("kl_mean").get<double>());
  return kl;
}

struct Line {
  std::string stroke;
  std::vector<std::pair<double, double>> points;
  int moves = 0;  // "M" commands: 1 plus one per gap
};

// The KL chart's lines by policy: <path class="kl-line" data-policy=... d="M x,y L x,y ...">.
std::map<std::string, Line> kl_lines(const std::string& html) {
  std::map<std::string, Line> lines;
  const std::regex path(R"re(<path class="kl-line" data-policy="([^"]*)" d="([^"]*)" fill="none" stroke="([^"]*)")re");
  for (std::sregex_iterator it(html.begin(), html.end(), path), end; it != end; ++it) {
    Line line;
    line.stroke = (*it)[3];
    std::string d = (*it)[2];
    for (char& c : d) {
      if (c == 'M') ++line.moves;
      if (c == 'M' || c == 'L' || c == ',') c = ' ';
    }
    std::istringstream in(d);
    double x = 0, y = 0;
    while (in >> x >> y) line.points.emplace_back(x, y);
    EXPECT_TRUE(lines.emplace((*it)[1], line).second) << "two lines for " << (*it)[1];
  }
  return lines;
}

// One line per row, a point per present bin from left to right, and the higher a bin's KL the
// higher its point (smaller SVG y); a missing bin is a gap, not a bridge.
TEST(ReportLongHtml, KlChartHasOneLinePerRowOrderedByBin) {
  const nlohmann::json report = long_report();
  const std::map<std::string, Line> lines = kl_lines(report_html(report));
  ASSERT_EQ(lines.size(), report.at("rows").size());
  for (const nlohmann::json& row : report.at("rows")) {
    const std::string policy = row.at("policy").get<std::string>();
    ASSERT_TRUE(lines.contains(policy)) << policy;
    const Line& line = lines.at(policy);
    std::vector<double> kl;
    for (const double v : kl_of(row)) {
      if (!std::isnan(v)) kl.push_back(v);
    }
    ASSERT_EQ(line.points.size(), kl.size()) << policy;
    for (std::size_t i = 0; i + 1 < line.points.size(); ++i) EXPECT_LT(line.points[i].first, line.points[i + 1].first) << policy;
    for (std::size_t i = 0; i < kl.size(); ++i) {
      for (std::size_t j = 0; j < kl.size(); ++j) {
        if (kl[i] > kl[j]) {
          EXPECT_LT(line.points[i].second, line.points[j].second) << policy << " bins " << i << ", " << j;
        }
      }
    }
  }
  EXPECT_EQ(lines.at("snapkv@1/8").moves, 2) << "the missing 2-4K bin must break the line";
  EXPECT_EQ(lines.at("h2o@1/8").moves, 1);
}

// A row that keeps every token is named in its legend by the spec it was asked for: the policy's
// name spells every parameter and is cut before the one that tells two kivi2 rows apart. The
// whole name stays in the entry's <title>.
TEST(ReportLongHtml, KeptRowsLegendNamesTheirSpec) {
  nlohmann::json report = long_report();
  nlohmann::json rotated = long_row(4, "kivi2:group=32,residual=128,rotate=hadamard", nullptr, {1e-2, 1e-2, 1e-2, 1e-2});
  rotated["spec"] = "kivi2:rotate=hadamard";
  report["rows"].push_back(rotated);
  const std::string html = report_html(report);
  EXPECT_NE(html.find(">kivi2:rotate=hadamard<title>kivi2:group=32,residual=128,rotate=hadamard</title></text>"),
            std::string::npos);
  EXPECT_EQ(html.find(">kivi2:group=32,residual=\u2026"), std::string::npos);
  // A budgeted row's entry is still its policy without the fraction.
  EXPECT_NE(html.find(">h2o<title>h2o@1/8</title></text>"), std::string::npos);
}

// The family is the name before ':' or '@': h2o@1/8 and h2o@1/4 share h2o's color (and mark), and
// snapkv has another.
TEST(ReportLongHtml, FractionRowsShareTheirFamilysMark) {
  const std::string html = report_html(long_report());
  const std::map<std::string, Line> lines = kl_lines(html);
  ASSERT_TRUE(lines.contains("h2o@1/8") && lines.contains("h2o@1/4") && lines.contains("snapkv@1/8"));
  EXPECT_EQ(lines.at("h2o@1/8").stroke, lines.at("h2o@1/4").stroke);
  EXPECT_NE(lines.at("h2o@1/8").stroke, lines.at("snapkv@1/8").stroke);
  // The scatters' marks too: one legend entry "h2o", none named with its fraction.
  const std::string first_svg = html.substr(html.find("<svg"), html.find("</svg>") - html.find("<svg"));
  EXPECT_NE(first_svg.find(">h2o</text>"), std::string::npos);
  EXPECT_EQ(first_svg.find(">h2o@1/8</text>"), std::string::npos);
}

// The reference's heat map and then one per row, each with a cell per (length, depth) whose
// tooltip holds its value; the null cell says "no item", never 0.
TEST(ReportLongHtml, HeatMapsHaveACellPerLengthAndDepth) {
  const nlohmann::json report = long_report();
  const std::string html = report_html(report);
  std::vector<std::string> maps;
  for (std::size_t at = html.find("<svg class=\"heat\""); at != std::string::npos; at = html.find("<svg class=\"heat\"", at + 1)) {
    maps.push_back(html.substr(at, html.find("</svg>", at) - at));
  }
  ASSERT_EQ(maps.size(), report.at("rows").size() + 1);
  EXPECT_NE(maps[0].find("full precision (reference)"), std::string::npos) << "the reference's grid comes first";
  const std::regex cell(R"re(<rect class="cell" [^>]*><title>([^<]*)</title></rect>)re");
  for (std::size_t m = 0; m < maps.size(); ++m) {
    std::vector<std::string> titles;
    for (std::sregex_iterator it(maps[m].begin(), maps[m].end(), cell), end; it != end; ++it) titles.push_back((*it)[1]);
    ASSERT_EQ(titles.size(), kLengths.size() * 11) << "map " << m;
    for (std::size_t l = 0; l < kLengths.size(); ++l) {
      for (std::size_t d = 0; d <= 10; ++d) {
        const std::string& t = titles[l * 11 + d];
        const std::string where = fmt::format("length {}, depth {}%: ", kLengths[l], 10 * d);
        EXPECT_NE(t.find(where), std::string::npos) << t;
        if (l == 0 && d == 10) {
          EXPECT_NE(t.find("no item"), std::string::npos) << t;
          EXPECT_EQ(t.find("exact"), std::string::npos) << t;
        } else if (m > 0) {
          EXPECT_NE(t.find(fmt::format("exact {:.3f}, agreement 0.500, 2 items", exact_at(static_cast<int>(m - 1), l, d))),
                    std::string::npos)
              << t;
        } else {
          EXPECT_NE(t.find("exact 1.000"), std::string::npos) << t;
        }
      }
    }
  }
}

// report.md's tables: KL / top-1 per bin (a missing bin "-"), the reference's perplexity per bin,
// exact / agreement per length and overall.
TEST(ReportLongHtml, MarkdownTablesHoldTheNumbers) {
  const std::string md = report_markdown(long_report());
  EXPECT_NE(md.find("## KL by context position"), std::string::npos);
  EXPECT_NE(md.find("0-1K 12.500 (64 tokens); 1-2K 11.500 (64 tokens)"), std::string::npos);
  EXPECT_NE(md.find("| `h2o@1/8` | 1.00e-03 / 0.9000 | 2.00e-03 / 0.8900 | 4.00e-03 / 0.8800 | 8.00e-03 / 0.8700 |"),
            std::string::npos);
  EXPECT_NE(md.find("| `snapkv@1/8` | 2.00e-04 / 0.8980 | 3.00e-04 / 0.8880 | - | 6.00e-04 / 0.8680 |"), std::string::npos);
  EXPECT_NE(md.find("## Retrieval by length"), std::string::npos);
  // h2o@1/8 at 1024 tokens: the mean of 0.00, 0.01, ..., 0.09 (depth 100% has no item) = 0.045.
  EXPECT_NE(md.find("| `h2o@1/8` | 0.045 / 0.500 |"), std::string::npos) << md;
  EXPECT_NE(md.find(" 0.625 / 0.812 |\n"), std::string::npos);
  EXPECT_NE(md.find("| full precision (reference) | 1.000 / - |"), std::string::npos);
}

// Without "mode": "long" (every report but report --long) there is no long section, even when a
// row happens to carry the fields, and the summary has no agreement column.
TEST(ReportLongHtml, OtherReportsShowNoLongSection) {
  nlohmann::json report = long_report();
  report.erase("mode");
  const std::string html = report_html(report), md = report_markdown(report);
  EXPECT_EQ(html.find("KL by context position"), std::string::npos);
  EXPECT_EQ(html.find("Retrieval by length and depth"), std::string::npos);
  EXPECT_EQ(html.find("class=\"heat\""), std::string::npos);
  EXPECT_EQ(html.find("<th>agreement</th>"), std::string::npos);
  EXPECT_EQ(md.find("KL by context position"), std::string::npos);
  EXPECT_EQ(md.find("Retrieval by length"), std::string::npos);
  report["mode"] = "long";
  EXPECT_NE(report_html(report).find("<th>agreement</th>"), std::string::npos);
}

// kvcheck report --render rewrites report.md and report.html from a report.json exactly as the
// run writes them, and refuses a file that is not a kvcheck report (exit 2, naming it).
TEST(ReportLongHtml, RenderRewritesThePagesFromReportJson) {
  const testing::TempDir dir;
  const nlohmann::json report = long_report();
  testing::write_file(dir / "report.json", report.dump(1));
  const testing::CliRun run = testing::run_kvcheck(fmt::format("report --render {} --out {}", testing::shell_quote(dir / "report.json"),
                                                               testing::shell_quote(dir / "pages")));
  ASSERT_EQ(run.code, 0) << run.output;
  EXPECT_EQ(testing::read_file(dir / "pages" / "report.html"), report_html(report));
  EXPECT_EQ(testing::read_file(dir / "pages" / "report.md"), report_markdown(report));
  testing::write_file(dir / "other.json", R"({"format": "kvcheck-sweep"})");
  const testing::CliRun bad = testing::run_kvcheck(fmt::format("report --render {} --out {}", testing::shell_quote(dir / "other.json"),
                                                               testing::shell_quote(dir / "pages")));
  EXPECT_EQ(bad.code, 2) << bad.output;
  EXPECT_NE(bad.output.find("other.json"), std::string::npos) << bad.output;
  EXPECT_NE(bad.output.find("format"), std::string::npos) << bad.output;
}

}  // namespace
}  // namespace kvcheck::cli
