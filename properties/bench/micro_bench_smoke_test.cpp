// The micro-benchmark binaries run as a user runs them, briefly: one instance each, JSON out, and
// every rate and ratio counter present, finite and positive. Never a speed threshold: speed
// belongs to the benchmarks' own reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;

json run_bench(const std::string& binary, const std::string& filter) {
  testing::TempDir dir;
  const std::filesystem::path out = dir / "bench.json";
  const testing::CliRun r =
      testing::run_command(testing::shell_quote(testing::binary_dir() / binary) + " --benchmark_filter='" + filter +
                           "' --benchmark_min_time=0.01 --benchmark_out_format=json --benchmark_out=" +
                           testing::shell_quote(out));
  EXPECT_EQ(r.code, 0) << r.output;
  return json::parse(testing::read_file(out));
}

// Every named counter of every run: present, finite, > 0.
void expect_counters(const json& j, const std::vector<std::string>& counters, std::size_t runs) {
  ASSERT_EQ(j.at("benchmarks").size(), runs) << j.dump(1);
  for (const json& b : j.at("benchmarks")) {
    EXPECT_FALSE(b.contains("error_occurred") && b.at("error_occurred").get<bool>()) << b.dump(1);
    for (const std::string& c : counters) {
      ASSERT_TRUE(b.contains(c)) << b.at("name") << " has no " << c;
      const double v = b.at(c).get<double>();
      EXPECT_TRUE(std::isfinite(v) && v > 0.0) << b.at("name") << " " << c << " = " << v;
    }
  }
}

TEST(MicroBenchSmoke, AttentionAndProjectionReportRatesAndRatios) {
  const json j = run_bench("kvcheck_bench_attention",
                           "BM_DecodeAttention/K8V4$|BM_DecodeAttention/K8V4/threads:|BM_DecodeAttentionCached/K8V4$|"
                           "BM_LinearRows/32/128/384$|BM_PrefillAttention/512$");
  // The decode rows run again on every core (at most 32) when the machine has more than one.
  const bool threaded = std::thread::hardware_concurrency() > 1;
  ASSERT_EQ(j.at("benchmarks").size(), threaded ? 5u : 4u) << j.dump(1);
  if (threaded) {
    const std::string name = "BM_DecodeAttention/K8V4/threads:" +
                             std::to_string(std::min(std::thread::hardware_concurrency(), 32U)) + "/real_time";
    EXPECT_TRUE(std::any_of(j.at("benchmarks").begin(), j.at("benchmarks").end(),
                            [&](const json& b) { return b.at("name") == name; }))
        << "no " << name << " in " << j.dump(1);
  }
  for (const json& b : j.at("benchmarks")) {
    const std::string name = b.at("name");
    if (name.rfind("BM_DecodeAttentionCached", 0) == 0) {
      expect_counters(json{{"benchmarks", {b}}}, {"bytes_per_second", "ns_per_slot"}, 1);
    } else if (name.rfind("BM_DecodeAttention", 0) == 0) {
      expect_counters(json{{"benchmarks", {b}}}, {"bytes_per_second", "vs_copy_bw", "stored_MiB"}, 1);
      // K8V4 at head_dim 128: 128 + 4 key bytes and 64 + 4 value bytes per token and head.
      EXPECT_DOUBLE_EQ(b.at("bytes_per_token_head").get<double>(), 200.0);
    } else if (name.rfind("BM_PrefillAttention", 0) == 0) {
      expect_counters(json{{"benchmarks", {b}}}, {"tokens/s", "FLOP/s", "vs_gemm"}, 1);
    } else {
      expect_counters(json{{"benchmarks", {b}}}, {"FLOP/s", "vs_gemm"}, 1);
    }
  }
}

TEST(MicroBenchSmoke, QuantizersAndPagesReportRates) {
  expect_counters(run_bench("kvcheck_bench_kernels", "BM_Memcpy$|BM_Quantize/int8/token$"), {"bytes_per_second"}, 2);
  expect_counters(run_bench("kvcheck_bench_pages", "BM_CompactionRound/1$"), {"compaction_ms", "heads"}, 1);
}

}  // namespace
}  // namespace kvcheck
