// The NVTX ranges of a short `kvcheck bench --workload` run nest as optimized/nvtx_range.h says.
// The run is recorded through NVTX's own injection mechanism (the one Nsight Systems uses):
// NVTX_INJECTION64_PATH loads properties/nvtx/nvtx_recorder.cpp into the kvcheck process.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

struct Range {
  std::string name;
  int parent = -1;  // index into the ranges, -1 at top level
  std::map<std::string, int> children;
};

struct Trace {
  std::vector<Range> ranges;
  std::vector<std::string> errors;  // unmatched pops, ranges left open
};

Trace parse_trace(const std::string& path) {
  Trace t;
  std::ifstream in(path);
  std::map<int, std::vector<int>> stacks;  // per thread: open range indices
  std::string line;
  int number = 0;
  while (std::getline(in, line)) {
    ++number;
    std::istringstream words(line);
    std::string kind;
    int thread = -1;
    words >> kind >> thread;
    std::vector<int>& stack = stacks[thread];
    if (kind == "push") {
      std::string name;
      std::getline(words >> std::ws, name);
      const int parent = stack.empty() ? -1 : stack.back();
      t.ranges.push_back(Range{name, parent, {}});
      if (parent >= 0) ++t.ranges[static_cast<std::size_t>(parent)].children[name];
      stack.push_back(static_cast<int>(t.ranges.size()) - 1);
    } else if (kind == "pop") {
      if (stack.empty()) {
        t.errors.push_back("line " + std::to_string(number) + ": pop with no open range on thread " +
                           std::to_string(thread));
      } else {
        stack.pop_back();
      }
    } else {
      t.errors.push_back("line " + std::to_string(number) + ": unknown event '" + line + "'");
    }
  }
  for (const auto& [thread, stack] : stacks) {
    for (const int open : stack) {
      t.errors.push_back("range '" + t.ranges[static_cast<std::size_t>(open)].name + "' on thread " +
                         std::to_string(thread) + " never popped");
    }
  }
  return t;
}

TEST(NvtxRanges, ServingRunNestsAsDocumented) {
#ifndef KVCHECK_NVTX_RECORDER
  GTEST_SKIP() << "kvcheck was built without NVTX headers (KVCHECK_NVTX found no nvtx3/nvToolsExt.h): no ranges";
#else
  const testing::TempDir dir;
  const std::string trace_file = (dir.path() / "nvtx.trace").string();
  const std::string json_file = (dir.path() / "bench.json").string();
  // Six chat requests in a pool of about two full-context requests: preemption by swap happens
  // for the policies that can swap (h2o evicts, so it recomputes).
  const testing::CliRun run = testing::run_kvcheck(
      "bench --workload chat --requests 6 --policies int8,h2o --kv-budget 1179648 --preemption swap --quiet --json " +
          testing::shell_quote(json_file),
      "NVTX_INJECTION64_PATH=" + testing::shell_quote(KVCHECK_NVTX_RECORDER) +
          " KVCHECK_NVTX_TRACE=" + testing::shell_quote(trace_file));
  ASSERT_EQ(run.code, 0) << run.output;
  const Trace t = parse_trace(trace_file);
  ASSERT_FALSE(t.ranges.empty()) << "the recorder saw no range: was the injection library loaded?";
  for (const std::string& e : t.errors) ADD_FAILURE() << e;

  const std::set<std::string> known = {"step", "prefill", "decode", "swap", "attention", "quantize", "compaction"};
  const std::map<std::string, std::set<std::string>> parents = {
      {"step", {"serving"}},          {"prefill", {"step"}},           {"decode", {"step"}},
      {"swap", {"step"}},             {"attention", {"prefill", "decode"}}, {"quantize", {"prefill", "decode"}},
      {"compaction", {"prefill", "decode", "swap"}}};
  std::vector<std::string> top;
  std::map<std::string, int> count;
  for (const Range& r : t.ranges) {
    if (r.parent < 0) {
      top.push_back(r.name);
      continue;
    }
    ++count[r.name];
    ASSERT_TRUE(known.contains(r.name)) << "unexpected range '" << r.name << "'";
    std::string parent = t.ranges[static_cast<std::size_t>(r.parent)].name;
    if (parent.rfind("serving ", 0) == 0) parent = "serving";
    EXPECT_TRUE(parents.at(r.name).contains(parent)) << "'" << r.name << "' inside '" << parent << "'";
  }
  // One top-level range per configuration, in the order of the run.
  EXPECT_EQ(top, (std::vector<std::string>{"serving contiguous", "serving paged-fp16", "serving int8", "serving h2o"}));
  // Every forward runs attention once per layer of the embedded model (4 layers), except a decode
  // step the pool cannot hold: it stops before any compute, and a preemption follows it.
  std::int64_t aborted_decodes = 0;
  for (const Range& r : t.ranges) {
    if (r.name == "prefill" || r.name == "decode") {
      const auto a = r.children.find("attention");
      const int attention = a == r.children.end() ? 0 : a->second;
      if (r.name == "decode" && attention == 0) {
        ++aborted_decodes;
        continue;
      }
      EXPECT_EQ(attention, 4) << r.name << " with the wrong number of attention ranges";
    }
  }
  EXPECT_GE(count["prefill"], 4 * 6) << "every request's prefill in every configuration";
  EXPECT_GT(count["decode"], 0);
  EXPECT_GT(count["quantize"], 0);
  EXPECT_GT(count["compaction"], 0);
  // Each swap preemption is one swap out and, later, one swap in.
  std::ifstream in(json_file);
  const nlohmann::json j = nlohmann::json::parse(in);
  std::int64_t swaps = 0, preemptions = 0;
  for (const nlohmann::json& row : j.at("results")) {
    swaps += row.at("preemptions_by_kind").at("swap").get<std::int64_t>();
    preemptions += row.at("preemptions").get<std::int64_t>();
  }
  EXPECT_GT(swaps, 0) << "the run was meant to swap";
  EXPECT_EQ(count["swap"], 2 * swaps);
  EXPECT_EQ(aborted_decodes, preemptions) << "each preemption follows one decode step the pool could not hold";
#endif
}

}  // namespace
}  // namespace kvcheck
