// The committed long-context evaluation sets (datasets/synthetic/make_long_sets.py):
// long-retrieval.jsonl has every (task, length, depth) cell once, and under SmolLM2's own
// tokenizer and chat template each sampled item has the token count it records and an answer
// whose tokens follow the prompt's unchanged; long-text.jsonl joins consecutive held-out
// documents, each used once, into documents long enough for an 8K window.
#include <algorithm>
#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "oracles/eval_data.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"
#include "reference/chat_template.h"
#include "reference/tokenizer.h"

namespace kvcheck {
namespace {

using testing::source_path;

const std::vector<std::string> kTasks{"passkey", "kv", "needle"};
const std::vector<std::int64_t> kBuckets{1024, 2048, 4096, 8192};
constexpr std::int64_t kMinTextTokens = 8192 + 256;

// The `tokens` field of each line (informational: the loader ignores it).
std::vector<std::int64_t> recorded_tokens(const std::filesystem::path& file) {
  std::vector<std::int64_t> out;
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).at("tokens").get<std::int64_t>());
  }
  return out;
}

TEST(LongEvalSets, RetrievalHasEveryTaskLengthAndDepthOnce) {
  const auto file = source_path("datasets/eval/long-retrieval.jsonl");
  const std::vector<RetrievalItem> items = load_retrieval(file);  // ids unique, depth in 0..100
  const std::vector<std::int64_t> tokens = recorded_tokens(file);
  ASSERT_EQ(tokens.size(), items.size());
  std::set<std::tuple<std::string, std::int64_t, std::int64_t>> cells;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const RetrievalItem& r = items[i];
    SCOPED_TRACE(r.id);
    EXPECT_NE(std::find(kTasks.begin(), kTasks.end(), r.task), kTasks.end());
    EXPECT_NE(std::find(kBuckets.begin(), kBuckets.end(), r.length_bucket), kBuckets.end());
    EXPECT_EQ(r.depth % 10, 0);
    EXPECT_GE(r.depth, 0);
    EXPECT_EQ(r.id, fmt::format("{}-{}-d{:03d}", r.task, r.length_bucket, r.depth));
    EXPECT_TRUE(cells.emplace(r.task, r.length_bucket, r.depth).second) << "cell repeated";
    // The run appends answer_prefix, then expects " " + answer: neither may bring its own space.
    ASSERT_FALSE(r.answer_prefix.empty());
    EXPECT_NE(r.answer_prefix.back(), ' ');
    EXPECT_EQ(r.answer.find_first_not_of("0123456789"), std::string::npos);
    EXPECT_NE(r.prompt.find(r.answer), std::string::npos) << "the answer is stated in the context";
    EXPECT_GT(tokens[i], r.length_bucket * 3 / 4);
    EXPECT_LE(tokens[i], r.length_bucket);
  }
  EXPECT_EQ(cells.size(), kTasks.size() * kBuckets.size() * 11);
}

TEST(LongEvalSets, TextJoinsConsecutiveHeldoutDocumentsOnce) {
  const std::vector<HeldoutDocument> held = load_heldout(source_path("datasets/eval/heldout.jsonl"));
  const std::vector<HeldoutDocument> docs = load_heldout(source_path("datasets/eval/long-text.jsonl"));
  std::size_t next = 0;  // the held-out document the next long document starts with
  for (const HeldoutDocument& d : docs) {
    SCOPED_TRACE(d.id);
    std::string id;
    std::string text;
    for (std::size_t k = 0; text.size() < d.text.size() && next < held.size(); ++k, ++next) {
      id += k == 0 ? held[next].id : "+" + held[next].id.substr(std::string("brown-").size());
      text += (k == 0 ? "" : "\n\n") + held[next].text;
    }
    EXPECT_EQ(d.id, id);
    ASSERT_EQ(d.text, text);
  }
  EXPECT_GE(docs.size(), 6U);
  EXPECT_LT(held.size() - next, 4U) << "the documents left over would make one more";
}

// SmolLM2's tokenizer (kvcheck's, not llama.cpp's, which made the files): the recorded token
// count and the answer rule of one item per task and length (depths spread over the sample), and
// the length of every long text document.
TEST(LongEvalSets, SmolLm2TokenCountsAndAnswerTokensFollowThePrompt) {
  const std::filesystem::path model = testing::smollm2_gguf();
  if (model.empty()) GTEST_SKIP() << testing::kSmolLm2Missing;
  const auto started = std::chrono::steady_clock::now();
  const Tokenizer tok = Tokenizer::load(model);
  const std::optional<std::string> tmpl = find_chat_template(model);
  ASSERT_TRUE(tmpl.has_value());
  const auto file = source_path("datasets/eval/long-retrieval.jsonl");
  const std::vector<RetrievalItem> items = load_retrieval(file);
  const std::vector<std::int64_t> tokens = recorded_tokens(file);
  std::map<std::pair<std::string, std::int64_t>, int> seen;
  int checked = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const RetrievalItem& r = items[i];
    // Depth 0, 10, ... for the first sampled cell, shifted by 3 steps for each next one.
    const int n = static_cast<int>(seen.size());
    if (seen.count({r.task, r.length_bucket}) || r.depth != (n * 30) % 110) continue;
    seen[{r.task, r.length_bucket}] = 1;
    SCOPED_TRACE(r.id);
    const std::string input = render_chat(*tmpl, {{"user", r.prompt}}, true, model.string()) + r.answer_prefix;
    const std::vector<std::int32_t> prompt_ids = tok.encode(input, false);
    const std::vector<std::int32_t> full = tok.encode(input + " " + r.answer, false);
    std::vector<std::int32_t> joined = prompt_ids;
    const std::vector<std::int32_t> answer_ids = tok.encode(" " + r.answer, false);
    joined.insert(joined.end(), answer_ids.begin(), answer_ids.end());
    EXPECT_EQ(static_cast<std::int64_t>(full.size()), tokens[i]);
    EXPECT_EQ(full, joined) << "tokens(input + \" \" + answer) != tokens(input) + tokens(\" \" + answer)";
    ++checked;
  }
  EXPECT_EQ(checked, 12);
  for (const HeldoutDocument& d : load_heldout(source_path("datasets/eval/long-text.jsonl"))) {
    EXPECT_GE(static_cast<std::int64_t>(tok.encode(d.text, false).size()), kMinTextTokens) << d.id;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  RecordProperty("seconds", fmt::format("{:.1f}", seconds));
}

}  // namespace
}  // namespace kvcheck
