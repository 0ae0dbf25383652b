// report.html's plots as pictures: every mark inside its SVG, one polyline point per value, the
// x axis spanning exactly the data, and the page's declared encoding. The plots are what a reader
// compares policies by, so a mark drawn off the canvas or a line squeezed into part of its frame
// is a wrong report even when every number in the tables is right.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/report_html.h"

namespace kvcheck::cli {
namespace {

nlohmann::json row(const std::string& policy, double bytes, double kl, double acc) {
  return {{"policy", policy},
          {"kv_bytes_vs_fp16", bytes},
          {"kl_mean", kl},
          {"retrieval_accuracy", acc},
          {"kv_bytes_read_vs_fp16", bytes * 0.8},
          {"oracle_checks", 10},
          {"oracle_violations", 0},
          {"retrieval_accuracy_by_length", {{"128", acc}, {"512", acc / 2}}}};
}

// A report with every kind of plot: scatters, XKV's per-layer line (5 layers), SpvLLM's
// fragmentation lines (4 and 6 steps) and LeanKV heat tables of 2 layers x 3 kv heads and of one
// layer x 2 kv heads.
nlohmann::json full_report() {
  nlohmann::json xkv = row("xkv:budget=64", 0.25, 3e-3, 0.7);
  xkv["budget"] = 64;
  xkv["tokens_per_layer"] = {40.0, 52.0, 64.0, 70.0, 90.0};
  nlohmann::json lean = row("leankv:k=8,v=4", 0.4, 1e-3, 0.8);
  lean["bytes_vs_fp16_per_head"] = {{0.5, 0.25, 0.3}, {0.4, 0.45, 0.2}};
  nlohmann::json lean1 = row("leankv:k=4,v=2", 0.3, 2e-3, 0.75);
  lean1["bytes_vs_fp16_per_head"] = {{0.3, 0.2}};
  return {{"format", "kvcheck-report"},
          {"version", 1},
          {"command", "kvcheck report"},
          {"model", {{"path", "m"}, {"hash", "0"}}},
          {"settings", {{"prompts", 1}, {"prompt_tokens", 8}, {"continuation_tokens", 4}, {"retrieval_items", 1}}},
          {"reference", {{"perplexity", 50.0}}},
          {"rows", {row("full-fp32", 2.0, 1e-12, 1.0), row("int8", 0.5625, 4e-5, 0.9), xkv, lean, lean1}},
          {"spvllm_strategies",
           {{"budget", 32},
            {"strategies",
             {{{"strategy", "paged"}, {"fragmentation_by_step", {0.1, 0.2, 0.15, 0.3}}},
              {{"strategy", "slotted"}, {"fragmentation_by_step", {0.05, 0.1, 0.1, 0.12, 0.2, 0.25}}}}}}}};
}

std::vector<std::string> svgs(const std::string& html) {
  std::vector<std::string> out;
  for (std::size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    out.push_back(html.substr(at, html.find("</svg>", at) - at));
  }
  return out;
}

double attr(const std::string& tag, const char* name) {
  const std::smatch m = [&] {
    std::smatch r;
    std::regex_search(tag, r, std::regex(std::string("\\s") + name + "=\"([-0-9.e]+)\""));
    return r;
  }();
  return m.empty() ? std::nan("") : std::stod(m[1]);
}

// Every coordinate an SVG element places (x, x1, x2, cx and the y's, polyline points) lies
// within the picture's width and height.
TEST(ReportHtmlPlots, EveryMarkLiesInsideItsPicture) {
  const std::vector<std::string> pictures = svgs(report_html(full_report()));
  ASSERT_EQ(pictures.size(), 5U);  // three scatters, the layer budgets, the fragmentation
  const std::regex coord("\\s(x|x1|x2|cx|y|y1|y2|cy)=\"([-0-9.e]+)\"");
  const std::regex points("points=\"([^\"]*)\"");
  for (const std::string& svg : pictures) {
    const double w = attr(svg, "width"), h = attr(svg, "height");
    ASSERT_GT(w, 0.0);
    ASSERT_GT(h, 0.0);
    for (std::sregex_iterator it(svg.begin(), svg.end(), coord), end; it != end; ++it) {
      const double v = std::stod((*it)[2]);
      const std::string name = (*it)[1];
      const double top = name.starts_with("x") || name == "cx" ? w : h;
      EXPECT_GE(v, 0.0) << it->str();
      EXPECT_LE(v, top) << it->str();
    }
    for (std::sregex_iterator it(svg.begin(), svg.end(), points), end; it != end; ++it) {
      std::string p = (*it)[1];
      for (char& c : p) c = c == ',' ? ' ' : c;
      std::istringstream in(p);
      double x = 0, y = 0;
      while (in >> x >> y) {
        EXPECT_GE(x, 0.0);
        EXPECT_LE(x, w);
        EXPECT_GE(y, 0.0);
        EXPECT_LE(y, h);
      }
    }
  }
}

// Every policy family of a scatter has a mark of its own (color and shape): with the nineteen
// registered families, a palette that wraps would draw two families alike and the reader could not
// tell them apart. The points of one family all share its mark.
TEST(ReportHtmlPlots, EveryFamilyHasItsOwnMark) {
  nlohmann::json report = full_report();
  report["rows"] = nlohmann::json::array();
  for (int f = 0; f < 24; ++f) {
    for (int budget : {32, 64}) {
      report["rows"].push_back(row("family" + std::to_string(f) + ":budget=" + std::to_string(budget),
                                   0.1 + 0.03 * f + 0.001 * budget, 1e-3 * (1 + f), 0.5));
    }
  }
  const std::vector<std::string> pictures = svgs(report_html(report));
  ASSERT_FALSE(pictures.empty());
  const std::regex mark("<(circle|rect|polygon) [^>]*fill=\"(#[0-9a-f]{6})\"[^>]*><title>([^:<]+):");
  std::map<std::string, std::string> mark_of;  // family -> "shape color"
  for (std::sregex_iterator it(pictures[0].begin(), pictures[0].end(), mark), end; it != end; ++it) {
    const std::string fam = (*it)[3], look = std::string((*it)[1]) + " " + std::string((*it)[2]);
    const auto [at, inserted] = mark_of.emplace(fam, look);
    EXPECT_EQ(at->second, look) << fam << "'s points differ in mark";
  }
  ASSERT_EQ(mark_of.size(), 24U);
  std::set<std::string> looks;
  for (const auto& [fam, look] : mark_of) EXPECT_TRUE(looks.insert(look).second) << fam << " shares " << look;
}

// A line chart draws one point per value, at integer x from its first x; the x axis ends at the
// longest series' last point, so that point sits on the frame's right edge (a wider axis would
// squeeze every line into part of the frame).
TEST(ReportHtmlPlots, LinesHaveOnePointPerValueAndReachTheRightEdge) {
  const std::string html = report_html(full_report());
  const std::regex rect("<rect x=\"([-0-9.e]+)\" y=\"[-0-9.e]+\" width=\"([-0-9.e]+)\"");
  // A line chart's lines (the scatters' dashed Pareto front is a thinner polyline).
  const std::regex poly("<polyline points=\"([^\"]*)\" fill=\"none\" stroke=\"[^\"]*\" stroke-width=\"2\"");
  std::vector<std::size_t> counts;
  for (const std::string& svg : svgs(html)) {
    std::smatch frame;
    if (!std::regex_search(svg, poly) || !std::regex_search(svg, frame, rect)) continue;
    const double right = std::stod(frame[1]) + std::stod(frame[2]);
    double rightmost = 0.0;
    for (std::sregex_iterator it(svg.begin(), svg.end(), poly), end; it != end; ++it) {
      std::string p = (*it)[1];
      for (char& c : p) c = c == ',' ? ' ' : c;
      std::istringstream in(p);
      std::size_t n = 0;
      double x = 0, y = 0;
      while (in >> x >> y) {
        ++n;
        rightmost = std::max(rightmost, x);
      }
      counts.push_back(n);
    }
    EXPECT_NEAR(rightmost, right, 0.05) << "the x axis is wider than the data";
  }
  // XKV's 5 layers, then the strategies' 4 and 6 steps.
  EXPECT_EQ(counts, (std::vector<std::size_t>{5, 4, 6}));
}

// A heat table of bytes per (layer, kv head) has one column per kv head, whatever the number of
// layers.
TEST(ReportHtmlPlots, HeadMemoryTablesHaveAColumnPerKvHead) {
  const std::string html = report_html(full_report());
  const auto header = [&](const std::string& policy) {
    const std::size_t at = html.find("<h3><code>" + policy + "</code></h3>");
    EXPECT_NE(at, std::string::npos) << policy;
    return at == std::string::npos ? std::string() : html.substr(at, html.find("</tr>", at) - at);
  };
  EXPECT_NE(header("leankv:k=8,v=4").find("<th>2</th>"), std::string::npos);
  EXPECT_EQ(header("leankv:k=8,v=4").find("<th>3</th>"), std::string::npos);
  EXPECT_NE(header("leankv:k=4,v=2").find("<th>1</th>"), std::string::npos);
  EXPECT_EQ(header("leankv:k=4,v=2").find("<th>2</th>"), std::string::npos);
}

// The page is UTF-8 (the KL formula's ‖, the × in the settings line) and says so, else a browser
// opening the saved file guesses and shows mojibake.
TEST(ReportHtmlPlots, PageDeclaresUtf8) {
  const std::string html = report_html(full_report());
  const std::size_t head_end = html.find("</head>");
  ASSERT_NE(head_end, std::string::npos);
  EXPECT_NE(html.substr(0, head_end).find("<meta charset=\"utf-8\">"), std::string::npos);
  EXPECT_NE(html.find("\xc3\x97"), std::string::npos);  // ×: there is non-ASCII text to decode
}

// An axis in one part steps by the round number nearest the span (1, 2, 2.5, 5 x 10^k: the first
// at least 3/4 of it).
TEST(ReportHtmlPlots, OnePartAxisStepsByAboutTheSpan) {
  EXPECT_DOUBLE_EQ(nice_step(10.0, 1, false), 10.0);
  EXPECT_DOUBLE_EQ(nice_step(3.0, 1, false), 2.5);
  EXPECT_DOUBLE_EQ(nice_step(0.2, 1, false), 0.2);
  EXPECT_DOUBLE_EQ(nice_step(7.0, 1, true), 10.0);
}

}  // namespace
}  // namespace kvcheck::cli
