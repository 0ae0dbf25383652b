// kvcheck eval, run as a user runs it on a small random model with the test tokenizer and small
// JSONL fixtures: the JSON holds the required keys, perplexity equals a direct computation from
// ReferenceModel::forward, retrieval exact match is right, --limit keeps the first N, and bad
// files exit with code 2 and name the file, line and field.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"
#include "reference/generate.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::CliRun;
using testing::run_kvcheck;
using testing::TempDir;
using testing::write_file;

std::string q(const std::filesystem::path& p) { return testing::shell_quote(p); }

const char* const kDocs[] = {
    "The cache holds the keys and the values of every token that the model has read so far.",
    "Reading a train timetable in the rain is slow work.",
    "Cooking dinner while the weather turns cold outside.",
};

// A model (64 positions) and fixtures: three documents; retrieval items in buckets 8 and 16, the
// first built so that its answer is the model's greedy continuation.
struct EvalFixture {
  TempDir dir;
  std::filesystem::path model = dir / "model";
  std::filesystem::path heldout = dir / "heldout.jsonl";
  std::filesystem::path retrieval = dir / "retrieval.jsonl";
  std::string right_answer;

  EvalFixture() {
    const CliRun r = run_kvcheck("make-model --random --layers 2 --hidden 32 --heads 4 --kv-heads 2 --max-positions 64 "
                                 "--seed 5 --tokenizer " + q(testing::source_path("datasets/tiny/tokenizer.model")) +
                                 " --out " + q(model));
    EXPECT_EQ(r.code, 0) << r.output;
    std::string docs;
    for (int i = 0; i < 3; ++i) docs += json{{"id", "doc" + std::to_string(i)}, {"text", kDocs[i]}}.dump() + "\n";
    write_file(heldout, docs);

    // The greedy continuation of a prompt, kept only if its text encodes back to the same ids.
    const ReferenceModel ref = ReferenceModel::load(model);
    const Tokenizer tok = Tokenizer::load(model / "tokenizer.model");
    std::string prompt;
    for (const std::string p : {"The pass key is 42. The pass key is", "The cache holds", "Rain on the train"}) {
      for (std::int64_t n = 3; n >= 1 && right_answer.empty(); --n) {
        GenerateOptions o;
        o.max_new_tokens = n;
        o.stop_at_eos = false;
        const GenerateResult g = generate_greedy(ref, tok.encode(p, true), o);
        const std::string text = tok.decode(g.generated);
        if (!text.empty() && tok.encode(text, false) == g.generated) right_answer = text;
      }
      if (!right_answer.empty()) {
        prompt = p;
        break;
      }
    }
    EXPECT_FALSE(right_answer.empty());
    std::string items;
    items += json{{"id", "r1"}, {"task", "passkey"}, {"length_bucket", 8}, {"prompt", prompt}, {"answer", right_answer}}.dump() + "\n";
    items += json{{"id", "r2"}, {"task", "kv"}, {"length_bucket", 16}, {"prompt", "Keys and values"}, {"answer", "zzqx"}}.dump() + "\n";
    items += json{{"id", "r3"}, {"task", "kv"}, {"length_bucket", 16}, {"prompt", "Weather and trains"}, {"answer", "qqzx"}}.dump() + "\n";
    write_file(retrieval, items);
  }

  std::string args(const std::string& extra) const {
    return "eval --model " + q(model) + " --heldout " + q(heldout) + " --retrieval " + q(retrieval) + " " + extra;
  }
};

TEST(EvalCli, JsonHoldsTheRequiredKeysAndThePerplexityOfTheReference) {
  EvalFixture f;
  const CliRun r = run_kvcheck(f.args("--task all --quiet --json " + q(f.dir / "out.json")));
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(testing::read_file(f.dir / "out.json"));
  for (const char* key : {"perplexity", "unigram_perplexity", "retrieval_accuracy", "retrieval_accuracy_by_length",
                          "retrieval_accuracy_by_task", "model", "ppl", "retrieval", "attention"}) {
    EXPECT_TRUE(j.contains(key)) << key;
  }
  EXPECT_FALSE(std::filesystem::exists(f.dir / ("out.json.tmp")));

  // Perplexity directly: each document fits one window (context = min(64, 512) = 64).
  const ReferenceModel ref = ReferenceModel::load(f.model);
  const Tokenizer tok = Tokenizer::load(f.model / "tokenizer.model");
  double nll = 0.0;
  std::int64_t n = 0;
  for (const char* text : kDocs) {
    const std::vector<std::int32_t> ids = tok.encode(text, true);
    ASSERT_LE(ids.size(), 64U);
    const MatrixRM logits = ref.forward(ids);
    for (std::size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto row = logits.row(static_cast<Eigen::Index>(i)).cast<double>();
      const double m = row.maxCoeff();
      nll += m + std::log((row.array() - m).exp().sum()) - row(ids[i + 1]);
      ++n;
    }
  }
  EXPECT_EQ(j["ppl"]["predicted_tokens"], n);
  EXPECT_EQ(j["ppl"]["windows"], 3);
  const double want = std::exp(nll / static_cast<double>(n));
  EXPECT_NEAR(j["perplexity"].get<double>(), want, 1e-9 * want);
  EXPECT_GT(j["unigram_perplexity"].get<double>(), 1.0);

  EXPECT_NEAR(j["retrieval_accuracy"].get<double>(), 1.0 / 3.0, 1e-15);
  EXPECT_EQ(j["retrieval_accuracy_by_length"]["8"], 1.0);
  EXPECT_EQ(j["retrieval_accuracy_by_length"]["16"], 0.0);
  EXPECT_EQ(j["retrieval_accuracy_by_task"]["passkey"], 1.0);
  const json& results = j["retrieval"]["results"];
  ASSERT_EQ(results.size(), 3U);
  EXPECT_EQ(results[0]["id"], "r1");
  EXPECT_EQ(results[0]["correct"], true);
  EXPECT_EQ(results[0]["generated"], f.right_answer);
  EXPECT_EQ(results[1]["correct"], false);

  EXPECT_EQ(j["attention"]["length_bucket"], 16);
  EXPECT_EQ(j["attention"]["prompts"], 2);
  EXPECT_EQ(j["attention"]["heads"].size(), 4U);  // 2 layers x 2 kv heads
  EXPECT_NE(r.output.find("first_token_mass"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("unigram perplexity"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("kvcheck: perplexity:"), std::string::npos) << "--quiet still printed progress";
}

TEST(EvalCli, LimitKeepsTheFirstItemsAndOtherTasksAreNull) {
  EvalFixture f;
  CliRun r = run_kvcheck(f.args("--task retrieval --limit 2 --json " + q(f.dir / "out.json")));
  ASSERT_EQ(r.code, 0) << r.output;
  json j = json::parse(testing::read_file(f.dir / "out.json"));
  EXPECT_EQ(j["retrieval"]["items"], 2);
  EXPECT_EQ(j["retrieval"]["results"][1]["id"], "r2");
  EXPECT_TRUE(j["perplexity"].is_null());
  EXPECT_TRUE(j["attention"].is_null());
  EXPECT_EQ(j["limit"], 2);
  // Progress on a pipe: plain lines, at most ten per phase.
  std::size_t lines = 0;
  for (std::size_t at = r.output.find("kvcheck: retrieval:"); at != std::string::npos;
       at = r.output.find("kvcheck: retrieval:", at + 1)) {
    ++lines;
  }
  EXPECT_GE(lines, 1U) << r.output;
  EXPECT_LE(lines, 10U) << r.output;

  r = run_kvcheck(f.args("--task ppl --limit 1 --quiet --json " + q(f.dir / "out.json")));
  ASSERT_EQ(r.code, 0) << r.output;
  j = json::parse(testing::read_file(f.dir / "out.json"));
  EXPECT_EQ(j["ppl"]["documents"], 1);
  EXPECT_TRUE(j["retrieval_accuracy"].is_null());

  r = run_kvcheck(f.args("--task attention --limit 1 --quiet --json " + q(f.dir / "out.json")));
  ASSERT_EQ(r.code, 0) << r.output;
  j = json::parse(testing::read_file(f.dir / "out.json"));
  EXPECT_EQ(j["attention"]["prompts"], 1);
}

TEST(EvalCli, PerplexityWindowsFollowContext) {
  EvalFixture f;
  const CliRun r = run_kvcheck(f.args("--task ppl --context 4 --quiet --json " + q(f.dir / "out.json")));
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = json::parse(testing::read_file(f.dir / "out.json"));
  // Every token after each document's BOS is predicted once whatever the window.
  const Tokenizer tok = Tokenizer::load(f.model / "tokenizer.model");
  std::int64_t predicted = 0;
  std::int64_t windows = 0;
  for (const char* text : kDocs) {
    const auto n = static_cast<std::int64_t>(tok.encode(text, true).size());
    predicted += n - 1;
    windows += (n - 1 + 2) / 3;  // ceil((n - 1) / 3): each window of 4 predicts 3
  }
  EXPECT_EQ(j["ppl"]["predicted_tokens"], predicted);
  EXPECT_EQ(j["ppl"]["windows"], windows);
  EXPECT_EQ(j["ppl"]["context"], 4);
}

// ---- bad input: exit code 2 and a message naming the file, line and field ----

struct EvalBadInput {
  std::string name;
  std::string file;      // "heldout" or "retrieval": which fixture to overwrite
  std::string content;   // its new content, or kRemove to delete it
  std::string extra;     // more flags
  std::vector<std::string> expect;  // "$FILE" stands for the overwritten file's path
};

const std::string kRemove = "<remove the file>";

void PrintTo(const EvalBadInput& c, std::ostream* os) { *os << c.name; }

class EvalCliBadInput : public ::testing::TestWithParam<EvalBadInput> {};

TEST_P(EvalCliBadInput, ExitsWithCode2AndNamesFileLineAndField) {
  EvalFixture f;
  const EvalBadInput& c = GetParam();
  const std::filesystem::path file = c.file == "heldout" ? f.heldout : f.retrieval;
  if (c.content == kRemove) {
    std::filesystem::remove(file);
  } else if (!c.file.empty()) {
    write_file(file, c.content);
  }
  const CliRun r = run_kvcheck(f.args("--quiet " + c.extra));
  EXPECT_EQ(r.code, 2) << r.output;
  for (const std::string& e : c.expect) {
    const std::string needle = e.rfind("$FILE", 0) == 0 ? file.string() + e.substr(5) : e;
    EXPECT_NE(r.output.find(needle), std::string::npos) << "'" << needle << "' not in: " << r.output;
  }
  EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
}

const std::string kGoodItem = R"({"id": "a", "task": "kv", "length_bucket": 8, "prompt": "The cache", "answer": "x"})";

INSTANTIATE_TEST_SUITE_P(
    Eval, EvalCliBadInput,
    ::testing::Values(
        EvalBadInput{"HeldoutNotJson", "heldout", "{\"id\": \"d\", \"text\": \"t\"}\nnot json\n", "--task ppl",
                     {"$FILE:2: line: not valid JSON"}},
        EvalBadInput{"HeldoutMissingText", "heldout", "{\"id\": \"d\"}\n", "--task ppl",
                     {"$FILE:1: text: missing field", R"({"id": string, "text": string})"}},
        EvalBadInput{"HeldoutEmpty", "heldout", "", "--task ppl", {"$FILE: file: holds no items"}},
        EvalBadInput{"RetrievalWrongType", "retrieval",
                     kGoodItem + "\n" + R"({"id": "b", "task": "kv", "length_bucket": "8", "prompt": "p", "answer": "x"})",
                     "--task retrieval", {"$FILE:2: length_bucket: is a string, expected an integer"}},
        EvalBadInput{"RetrievalMissingAnswer", "retrieval", R"({"id": "b", "task": "kv", "length_bucket": 8, "prompt": "p"})",
                     "--task retrieval", {"$FILE:1: answer: missing field"}},
        EvalBadInput{"RetrievalPromptTooLong", "retrieval",
                     kGoodItem + "\n" + json{{"id", "long-one"}, {"task", "kv"}, {"length_bucket", 512},
                                            {"prompt", [] { std::string s; for (int i = 0; i < 40; ++i) s += "the cache "; return s; }()},
                                            {"answer", "x"}}.dump(),
                     "--task retrieval", {"$FILE:2: prompt: item 'long-one'", "max_position_embeddings 64"}},
        EvalBadInput{"RetrievalErrorEvenForAttentionOnly", "retrieval", "[]\n", "--task attention",
                     {"$FILE:1: line: is an array, expected a JSON object"}},
        EvalBadInput{"MissingRetrievalFile", "retrieval", kRemove, "--task retrieval",
                     {"$FILE: file: not found", "\"length_bucket\": integer"}},
        EvalBadInput{"ContextTooSmall", "", "", "--task ppl --context 1", {"--context: 1: must be in [2, 64]"}},
        EvalBadInput{"ContextTooLarge", "", "", "--task ppl --context 65", {"--context: 65: must be in [2, 64]"}},
        EvalBadInput{"UnknownTask", "", "", "--task summarise", {"--task"}},
        EvalBadInput{"LimitZero", "", "", "--limit 0", {"--limit"}}),
    [](const ::testing::TestParamInfo<EvalBadInput>& p) { return p.param.name; });

TEST(EvalCli, MissingDefaultsNameThePathTheyLookedFor) {
  TempDir empty;
  CliRun r = run_kvcheck("eval --quiet", "KVCHECK_DATASETS=" + q(empty.path()));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find((empty.path() / "models" / "kvcheck-tiny").string()), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("KVCHECK_DATASETS"), std::string::npos) << r.output;

  EvalFixture f;
  r = run_kvcheck("eval --quiet --task ppl --model " + q(f.model), "KVCHECK_DATASETS=" + q(empty.path()));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find((empty.path() / "eval" / "heldout.jsonl").string() + ": file: not found"), std::string::npos)
      << r.output;
  r = run_kvcheck("eval --quiet --task retrieval --model " + q(f.model), "KVCHECK_DATASETS=" + q(empty.path()));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find((empty.path() / "eval" / "retrieval.jsonl").string() + ": file: not found"), std::string::npos)
      << r.output;
}

TEST(EvalCli, UnwritableJsonIsBadInput) {
  EvalFixture f;
  const CliRun r = run_kvcheck(f.args("--task ppl --quiet --json /nonexistent-dir/out.json"));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--json: /nonexistent-dir/out.json: cannot write"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace kvcheck
