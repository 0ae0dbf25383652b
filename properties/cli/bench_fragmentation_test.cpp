// kvcheck bench --fragmentation, run as a user runs it with a small --requests: the JSON's
// structure, and orderings that hold by construction (same schedule and victims for every
// strategy): free-block never holds more blocks than no-op at any step, so its p50, p99 and peak
// are at most no-op's; only sparse-copy copies or pre-allocates; eviction runs evict. And
// `kvcheck bench` without a mode exits with code 2 and says what to pass.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::CliRun;
using testing::run_kvcheck;

TEST(BenchFragmentationCli, JsonStructureAndOrderingByConstruction) {
  testing::TempDir dir;
  const std::filesystem::path out = dir / "frag.json";
  const CliRun r = run_kvcheck("bench --fragmentation --quiet --requests 48 --seed 3 --json " + testing::shell_quote(out));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("slot-reuse"), std::string::npos) << r.output;
  const json j = json::parse(testing::read_file(out));
  EXPECT_EQ(j.at("format"), "kvcheck-bench-fragmentation");
  EXPECT_EQ(j.at("version"), 1);
  EXPECT_EQ(j.at("requests"), 48);
  EXPECT_EQ(j.at("seed"), 3);
  ASSERT_EQ(j.at("budgets"), json::array({256, 512, 1024}));
  const json& rows = j.at("results");
  ASSERT_EQ(rows.size(), 1U + 3U * 4U);
  EXPECT_EQ(rows[0].at("strategy"), "no-eviction");
  EXPECT_EQ(rows[0].at("budget"), 0);
  EXPECT_EQ(rows[0].at("evictions"), 0);

  std::map<std::pair<std::int64_t, std::string>, json> by;
  for (const json& row : rows) {
    for (const char* key : {"strategy", "budget", "steps", "fragmentation", "evictions", "copies", "copied_slots",
                            "copied_bytes", "preallocated_blocks", "peak_blocks", "pool_blocks"}) {
      ASSERT_TRUE(row.contains(key)) << key << " in " << row.dump();
    }
    const json& f = row.at("fragmentation");
    for (const char* q : {"p50", "p99", "mean"}) {
      ASSERT_TRUE(f.at(q).is_number()) << q;
      EXPECT_GE(f.at(q).get<double>(), 0.0);
      EXPECT_LT(f.at(q).get<double>(), 1.0);
    }
    EXPECT_LE(f.at("p50").get<double>(), f.at("p99").get<double>());
    EXPECT_EQ(row.at("steps"), rows[0].at("steps")) << "every run sees the same schedule";
    EXPECT_LE(row.at("peak_blocks").get<std::int64_t>(), row.at("pool_blocks").get<std::int64_t>());
    by[{row.at("budget").get<std::int64_t>(), row.at("strategy").get<std::string>()}] = row;
  }
  for (const std::int64_t budget : {256, 512, 1024}) {
    const json& noop = by.at({budget, "no-op"});
    const json& free_block = by.at({budget, "free-block"});
    const json& sparse = by.at({budget, "sparse-copy"});
    const json& reuse = by.at({budget, "slot-reuse"});
    for (const char* q : {"p50", "p99", "mean"}) {
      EXPECT_LE(free_block.at("fragmentation").at(q).get<double>(), noop.at("fragmentation").at(q).get<double>() + 1e-12)
          << budget << " " << q;
    }
    EXPECT_LE(free_block.at("peak_blocks").get<std::int64_t>(), noop.at("peak_blocks").get<std::int64_t>()) << budget;
    for (const json* row : {&noop, &free_block, &reuse}) {
      EXPECT_EQ(row->at("copies"), 0);
      EXPECT_EQ(row->at("copied_slots"), 0);
      EXPECT_EQ(row->at("preallocated_blocks"), 0);
      EXPECT_EQ(row->at("evictions"), noop.at("evictions"));
    }
    EXPECT_EQ(sparse.at("evictions"), noop.at("evictions"));
    EXPECT_EQ(sparse.at("copies"), sparse.at("evictions"));  // one sparse copy per eviction
    if (noop.at("evictions").get<std::int64_t>() > 0) {
      EXPECT_GT(sparse.at("copied_slots").get<std::int64_t>(), 0);
      EXPECT_GT(sparse.at("preallocated_blocks").get<std::int64_t>(), 0);
    }
  }
  // The smallest budget evicts (a 48-request lognormal workload has sequences over 256 tokens).
  EXPECT_GT(by.at({256, "no-op"}).at("evictions").get<std::int64_t>(), 0);
}

TEST(BenchFragmentationCli, NoModeIsAnError) {
  const CliRun r = run_kvcheck("bench");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--fragmentation"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvcheck
