// kvcheck report's human-readable outputs, from report.json's object: report.md (summary tables)
// and report.html (one self-contained file, no network), with inline SVG plots of KV bytes
// against KL and against retrieval accuracy per policy with the Pareto front marked (as MiniKV's
// Figure 5 and LeanKV's Figure 10), the per-layer budgets of XKV and PyramidKV, SpvLLM's
// fragmentation over the decode steps per slot strategy, and heat tables of retrieval accuracy
// by context length and of LeanKV's bytes per (layer, kv head).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvcheck::cli {

// Indices of the rows on the Pareto front of (x, y): no other row has x <= and y better (lower
// when lower_is_better) with one of them strictly; ordered by x.
std::vector<std::size_t> pareto_front(const std::vector<double>& x, const std::vector<double>& y, bool lower_is_better);

// The round tick step (1, 2, 2.5 or 5 times a power of ten; no 2.5 and at least 1 on an integer
// axis) that cuts a range of `span` into about `target` parts.
double nice_step(double span, int target, bool integer);

std::string report_markdown(const nlohmann::json& report);
std::string report_html(const nlohmann::json& report);

}  // namespace kvcheck::cli
