// The serving benchmark's workloads (bench/serving_workload.h): deterministic per seed, every
// request fits the context, each workload has the shape it is named for, Poisson arrivals have
// the asked rate, the JSONL file round-trips and its errors name file, line and field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "bench/serving_workload.h"
#include "properties/support/test_support.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

ServingWorkloadConfig config(const std::string& name, std::int64_t requests, std::int64_t context = 512) {
  ServingWorkloadConfig c;
  c.name = name;
  c.requests = requests;
  c.max_context = context;
  c.seed = 7;
  return c;
}

double mean(const std::vector<ServingRequest>& rs, std::int64_t ServingRequest::*field) {
  double s = 0.0;
  for (const ServingRequest& r : rs) s += static_cast<double>(r.*field);
  return s / static_cast<double>(rs.size());
}

TEST(ServingWorkload, SeededAndWithinTheContext) {
  for (const char* name : serving_workload_names()) {
    const std::vector<ServingRequest> a = make_serving_workload(config(name, 300));
    const std::vector<ServingRequest> b = make_serving_workload(config(name, 300));
    ServingWorkloadConfig other = config(name, 300);
    other.seed = 8;
    const std::vector<ServingRequest> c = make_serving_workload(other);
    ASSERT_EQ(a.size(), 300u);
    bool differs = false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].id, static_cast<std::int64_t>(i));
      EXPECT_EQ(a[i].prompt_tokens, b[i].prompt_tokens) << name;
      EXPECT_EQ(a[i].output_tokens, b[i].output_tokens) << name;
      differs |= a[i].prompt_tokens != c[i].prompt_tokens || a[i].output_tokens != c[i].output_tokens;
      EXPECT_GE(a[i].prompt_tokens, 1) << name;
      EXPECT_GE(a[i].output_tokens, 1) << name;
      EXPECT_LE(a[i].prompt_tokens + a[i].output_tokens, 512) << name << " request " << i;
      EXPECT_EQ(a[i].arrival_s, 0.0) << "rate 0: all at once";
    }
    EXPECT_TRUE(differs) << name << ": another seed gives the same workload";
  }
}

TEST(ServingWorkload, EachWorkloadHasItsShape) {
  // A long context leaves chat's lengths unclamped: ShareGPT's means (224.7, 208.9) within 8%.
  const auto chat = make_serving_workload(config("chat", 4000, 8192));
  EXPECT_NEAR(mean(chat, &ServingRequest::prompt_tokens), 224.7, 0.08 * 224.7);
  EXPECT_NEAR(mean(chat, &ServingRequest::output_tokens), 208.9, 0.08 * 208.9);
  // Reasoning: short prompts, generations near the cap (0.75 x cap on average).
  ServingWorkloadConfig rc = config("reasoning", 2000, 8192);
  rc.reasoning_cap = 4096;
  const auto reasoning = make_serving_workload(rc);
  EXPECT_LT(mean(reasoning, &ServingRequest::prompt_tokens), 80.0);
  EXPECT_NEAR(mean(reasoning, &ServingRequest::output_tokens), 0.75 * 4096, 0.1 * 4096);
  for (const ServingRequest& r : reasoning) EXPECT_LE(r.output_tokens, 4096);
  // Long context: prompts in [0.6, 0.9] of the context, answers of at most 64 tokens.
  for (const ServingRequest& r : make_serving_workload(config("long-context", 500, 1000))) {
    EXPECT_GE(r.prompt_tokens, 600);
    EXPECT_LE(r.prompt_tokens, 900);
    EXPECT_LE(r.output_tokens, 64);
  }
  // Shared prefix: a quarter of the context, the same for every request, and a user turn after it.
  for (const ServingRequest& r : make_serving_workload(config("shared-prefix", 200, 512))) {
    EXPECT_EQ(r.shared_prefix_tokens, 128);
    EXPECT_GT(r.prompt_tokens, 128);
  }
}

TEST(ServingWorkload, PoissonArrivalsHaveTheRate) {
  ServingWorkloadConfig c = config("chat", 4000);
  c.rate = 20.0;
  const auto rs = make_serving_workload(c);
  std::vector<double> gaps;
  for (std::size_t i = 1; i < rs.size(); ++i) {
    ASSERT_GE(rs[i].arrival_s, rs[i - 1].arrival_s) << "arrivals go forward";
    gaps.push_back(rs[i].arrival_s - rs[i - 1].arrival_s);
  }
  const double m = std::accumulate(gaps.begin(), gaps.end(), 0.0) / static_cast<double>(gaps.size());
  EXPECT_NEAR(m, 1.0 / 20.0, 0.1 / 20.0);
  // Exponential gaps: the median is ln 2 times the mean.
  std::sort(gaps.begin(), gaps.end());
  EXPECT_NEAR(gaps[gaps.size() / 2] / m, std::log(2.0), 0.08);
}

TEST(ServingWorkload, RejectsBadConfigNamingTheOption) {
  testing::expect_input_error([] { make_serving_workload(config("chatty", 4)); }, {"--workload", "chatty", "chat"});
  testing::expect_input_error([] { make_serving_workload(config("chat", 0)); }, {"--requests"});
  ServingWorkloadConfig c = config("chat", 4);
  c.rate = -1.0;
  testing::expect_input_error([&] { make_serving_workload(c); }, {"--rate"});
}

TEST(ServingWorkload, FileRoundTripsAndErrorsNameLineAndField) {
  testing::TempDir dir;
  ServingWorkloadConfig c = config("shared-prefix", 12);
  c.rate = 3.0;
  const auto rs = make_serving_workload(c);
  save_serving_workload(dir / "w.jsonl", rs);
  const auto back = load_serving_workload(dir / "w.jsonl", 512, 100);
  ASSERT_EQ(back.size(), rs.size());
  for (std::size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(back[i].id, rs[i].id);
    EXPECT_DOUBLE_EQ(back[i].arrival_s, rs[i].arrival_s);
    EXPECT_EQ(back[i].prompt_tokens, rs[i].prompt_tokens);
    EXPECT_EQ(back[i].output_tokens, rs[i].output_tokens);
    EXPECT_EQ(back[i].shared_prefix_tokens, rs[i].shared_prefix_tokens);
  }
  const auto ids = parse_serving_workload("{\"prompt_ids\": [1, 5, 9], \"output_tokens\": 4}\n\n", "x", 512, 10);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_EQ(ids[0].prompt, (std::vector<std::int32_t>{1, 5, 9}));
  EXPECT_EQ(ids[0].prompt_tokens, 3);
  const auto bad = [](const std::string& text, const std::vector<std::string>& needles) {
    testing::expect_input_error([&] { parse_serving_workload(text, "w.jsonl", 512, 10); }, needles);
  };
  bad("{\"prompt_tokens\": 3, \"output_tokens\": 4}\n{oops\n", {"w.jsonl:2", "json"});
  bad("[1, 2]\n", {"w.jsonl:1", "object"});
  bad("{\"prompt_tokens\": 3}\n", {"w.jsonl:1", "output_tokens", "missing"});
  bad("{\"prompt_tokens\": 3, \"output_tokens\": 0}\n", {"w.jsonl:1", "output_tokens"});
  bad("{\"prompt_tokens\": \"3\", \"output_tokens\": 4}\n", {"w.jsonl:1", "prompt_tokens", "integer"});
  bad("{\"prompt_tokens\": 500, \"output_tokens\": 13}\n", {"w.jsonl:1", "exceed", "512"});
  bad("{\"prompt_ids\": [1, 10], \"output_tokens\": 1}\n", {"w.jsonl:1", "prompt_ids", "10"});
  bad("{\"prompt_ids\": [], \"output_tokens\": 1}\n", {"w.jsonl:1", "prompt_tokens"});
  bad("{\"id\": 4, \"prompt_tokens\": 3, \"output_tokens\": 4}\n{\"id\": 4, \"prompt_tokens\": 3, \"output_tokens\": 4}\n",
      {"w.jsonl:2", "id", "twice"});
  bad("{\"prompt_tokens\": 3, \"output_tokens\": 4, \"arrival_s\": -1}\n", {"w.jsonl:1", "arrival_s"});
  bad("{\"prompt_tokens\": 3, \"output_tokens\": 4, \"shared_prefix_tokens\": 4}\n", {"w.jsonl:1", "shared_prefix_tokens"});
  bad("\n  \n", {"w.jsonl", "no request"});
  testing::expect_input_error([&] { load_serving_workload(dir / "missing.jsonl", 512, 10); }, {"missing.jsonl"});
}

TEST(ServingWorkload, PromptsShareThePrefixAndNothingElse) {
  std::vector<std::int32_t> text(1000);
  std::iota(text.begin(), text.end(), 3);  // every position a distinct id
  auto rs = make_serving_workload(config("shared-prefix", 20));
  rs[3].prompt = {1, 2, 3};  // given ids are kept as they are
  rs[3].prompt_tokens = 3;
  fill_prompts(rs, text, 1, 5);
  std::set<std::vector<std::int32_t>> suffixes;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const ServingRequest& r = rs[i];
    ASSERT_EQ(static_cast<std::int64_t>(r.prompt.size()), r.prompt_tokens);
    EXPECT_EQ(r.prompt[0], 1) << "BOS first";
    if (i == 3) {
      EXPECT_EQ(r.prompt, (std::vector<std::int32_t>{1, 2, 3}));
      continue;
    }
    // The prefix is the text's beginning: the same tokens for every request.
    for (std::int64_t t = 1; t < r.shared_prefix_tokens; ++t) EXPECT_EQ(r.prompt[t], text[t - 1]);
    suffixes.insert(std::vector<std::int32_t>(r.prompt.begin() + r.shared_prefix_tokens, r.prompt.end()));
  }
  EXPECT_GT(suffixes.size(), 15u) << "user turns start at seeded offsets";
}

}  // namespace
}  // namespace kvcheck
