// Reading the evaluation sets: valid files, and every malformed line named by file, line and field.
#include <gtest/gtest.h>

#include <tuple>

#include "oracles/eval_data.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;
using testing::TempDir;
using testing::write_file;

const std::string kItemA =
    R"({"id": "a", "task": "passkey", "length_bucket": 128, "prompt": "The key is 7. The key is", "answer": "7"})";
const std::string kItemB =
    R"({"id": "b", "task": "kv", "length_bucket": 256, "prompt": "x", "answer": "y", "extra": [1, 2]})";

TEST(EvalData, ReadsHeldoutDocumentsAndSkipsBlankLines) {
  TempDir dir;
  write_file(dir / "h.jsonl", "{\"id\": \"d1\", \"text\": \"Some text.\"}\n\n  \r\n{\"id\": \"d2\", \"text\": \"More\"}\r\n");
  const std::vector<HeldoutDocument> docs = load_heldout(dir / "h.jsonl");
  ASSERT_EQ(docs.size(), 2U);
  EXPECT_EQ(docs[0].id, "d1");
  EXPECT_EQ(docs[0].text, "Some text.");
  EXPECT_EQ(docs[0].line, 1);
  EXPECT_EQ(docs[1].id, "d2");
  EXPECT_EQ(docs[1].line, 4);
}

TEST(EvalData, ReadsRetrievalItemsIgnoringExtraFields) {
  TempDir dir;
  write_file(dir / "r.jsonl", kItemA + "\n" + kItemB);  // no final newline
  const std::vector<RetrievalItem> items = load_retrieval(dir / "r.jsonl");
  ASSERT_EQ(items.size(), 2U);
  EXPECT_EQ(items[0].task, "passkey");
  EXPECT_EQ(items[0].length_bucket, 128);
  EXPECT_EQ(items[0].prompt, "The key is 7. The key is");
  EXPECT_EQ(items[0].answer, "7");
  EXPECT_EQ(items[1].length_bucket, 256);
  EXPECT_EQ(items[1].line, 2);
}

TEST(EvalData, ReadsDepthAndAnswerPrefixWhenPresent) {
  TempDir dir;
  const std::string chat =
      R"({"id": "passkey-4096-d030", "task": "passkey", "length_bucket": 4096, "depth": 30, "prompt": "Key 7. What is the key?", )"
      R"("answer_prefix": "The pass key is", "answer": "7", "tokens": 4000})";
  const std::string edges =
      R"({"id": "e", "task": "kv", "length_bucket": 1024, "depth": 0, "prompt": "p", "answer": "q"})" "\n"
      R"({"id": "f", "task": "kv", "length_bucket": 1024, "depth": 100, "prompt": "p", "answer": "q"})";
  write_file(dir / "r.jsonl", kItemA + "\n" + chat + "\n" + edges + "\n");
  const std::vector<RetrievalItem> items = load_retrieval(dir / "r.jsonl");
  ASSERT_EQ(items.size(), 4U);
  EXPECT_EQ(items[0].depth, -1);  // absent
  EXPECT_EQ(items[0].answer_prefix, "");
  EXPECT_EQ(items[1].depth, 30);
  EXPECT_EQ(items[1].answer_prefix, "The pass key is");
  EXPECT_EQ(items[1].prompt, "Key 7. What is the key?");
  EXPECT_EQ(items[1].length_bucket, 4096);
  EXPECT_EQ(items[2].depth, 0);
  EXPECT_EQ(items[2].answer_prefix, "");
  EXPECT_EQ(items[3].depth, 100);
}

TEST(EvalData, RetrievalSubsetSpreadsOverTaskAndBucket) {
  // A file sorted by task, then bucket: a2 a3 a4 (passkey 128), b... (passkey 256), c... (kv 128).
  std::vector<RetrievalItem> items;
  std::int64_t line = 0;
  for (const auto& [prefix, task, bucket] : {std::tuple{"a", "passkey", 128}, std::tuple{"b", "passkey", 256},
                                              std::tuple{"c", "kv", 128}}) {
    for (int i = 0; i < 3; ++i) items.push_back({prefix + std::to_string(i), task, bucket, "p", "q", ++line});
  }
  const auto ids = [](const std::vector<RetrievalItem>& v) {
    std::string s;
    for (const RetrievalItem& r : v) s += r.id + " ";
    return s;
  };
  EXPECT_EQ(ids(retrieval_subset(items, 4)), "a0 a1 b0 c0 ");  // rounds: a0 b0 c0, then a1; file order
  EXPECT_EQ(ids(retrieval_subset(items, 2)), "a0 b0 ");
  EXPECT_EQ(ids(retrieval_subset(items, 7)), "a0 a1 a2 b0 b1 c0 c1 ");
  EXPECT_EQ(retrieval_subset(items, 9).size(), 9U);
  EXPECT_EQ(retrieval_subset(items, 100).size(), 9U);
  EXPECT_TRUE(retrieval_subset(items, 0).empty());
}

struct BadLine {
  std::string name;
  std::string content;               // the whole file
  std::vector<std::string> expect;   // after "FILE"
};

void PrintTo(const BadLine& c, std::ostream* os) { *os << c.name; }

class EvalDataBadRetrieval : public ::testing::TestWithParam<BadLine> {};

TEST_P(EvalDataBadRetrieval, NamesFileLineAndField) {
  TempDir dir;
  const auto file = dir / "r.jsonl";
  write_file(file, GetParam().content);
  std::vector<std::string> needles{file.string()};
  needles.insert(needles.end(), GetParam().expect.begin(), GetParam().expect.end());
  expect_input_error([&] { load_retrieval(file); }, needles);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, EvalDataBadRetrieval,
    ::testing::Values(
        BadLine{"NotJson", kItemA + "\n{\"id\": \"b\", oops}\n", {":2: line: not valid JSON", "length_bucket"}},
        BadLine{"NotAnObject", kItemA + "\n[1, 2]\n", {":2: line: is an array, expected a JSON object"}},
        BadLine{"MissingField", R"({"id": "a", "task": "kv", "length_bucket": 1, "prompt": "p"})",
                {":1: answer: missing field", "\"answer\": string"}},
        BadLine{"StringWhereIntegerExpected",
                R"({"id": "a", "task": "kv", "length_bucket": "128", "prompt": "p", "answer": "q"})",
                {":1: length_bucket: is a string, expected an integer"}},
        BadLine{"FloatWhereIntegerExpected",
                R"({"id": "a", "task": "kv", "length_bucket": 128.5, "prompt": "p", "answer": "q"})",
                {":1: length_bucket: is a number (not an integer), expected an integer"}},
        BadLine{"NumberWhereStringExpected",
                R"({"id": 7, "task": "kv", "length_bucket": 128, "prompt": "p", "answer": "q"})",
                {":1: id: is an integer, expected a string"}},
        BadLine{"EmptyAnswer", R"({"id": "a", "task": "kv", "length_bucket": 128, "prompt": "p", "answer": ""})",
                {":1: answer: empty string"}},
        BadLine{"NonPositiveBucket", R"({"id": "a", "task": "kv", "length_bucket": 0, "prompt": "p", "answer": "q"})",
                {":1: length_bucket: must be positive"}},
        BadLine{"DepthAString",
                R"({"id": "a", "task": "kv", "length_bucket": 128, "depth": "30", "prompt": "p", "answer": "q"})",
                {":1: depth: is a string, expected an integer", "\"depth\": integer 0..100"}},
        BadLine{"DepthNotAnInteger",
                R"({"id": "a", "task": "kv", "length_bucket": 128, "depth": 30.5, "prompt": "p", "answer": "q"})",
                {":1: depth: is a number (not an integer), expected an integer"}},
        BadLine{"DepthNull", R"({"id": "a", "task": "kv", "length_bucket": 128, "depth": null, "prompt": "p", "answer": "q"})",
                {":1: depth: is null, expected an integer"}},
        BadLine{"DepthNegative",
                kItemA + "\n" + R"({"id": "b", "task": "kv", "length_bucket": 128, "depth": -1, "prompt": "p", "answer": "q"})",
                {":2: depth: must be a percent in 0..100, got -1"}},
        BadLine{"DepthAbove100",
                R"({"id": "a", "task": "kv", "length_bucket": 128, "depth": 101, "prompt": "p", "answer": "q"})",
                {":1: depth: must be a percent in 0..100, got 101"}},
        BadLine{"AnswerPrefixNotAString",
                R"({"id": "a", "task": "kv", "length_bucket": 128, "prompt": "p", "answer_prefix": ["x"], "answer": "q"})",
                {":1: answer_prefix: is an array, expected a string", "\"answer_prefix\": string"}},
        BadLine{"AnswerPrefixEmpty",
                R"({"id": "a", "task": "kv", "length_bucket": 128, "prompt": "p", "answer_prefix": "", "answer": "q"})",
                {":1: answer_prefix: empty string"}},
        BadLine{"DuplicateId", kItemA + "\n" + kItemB + "\n" + kItemA + "\n", {":3: id: 'a' repeats the id of line 1"}},
        BadLine{"EmptyFile", "", {"file: holds no items"}},
        BadLine{"OnlyBlankLines", "\n  \n\n", {"file: holds no items"}}),
    [](const ::testing::TestParamInfo<BadLine>& p) { return p.param.name; });

TEST(EvalData, HeldoutErrorsNameFileLineAndField) {
  TempDir dir;
  const auto file = dir / "h.jsonl";
  write_file(file, "{\"id\": \"d1\", \"text\": \"ok\"}\n{\"id\": \"d2\", \"text\": 5}\n");
  expect_input_error([&] { load_heldout(file); }, {file.string() + ":2: text: is an integer, expected a string"});
  write_file(file, "{\"id\": \"d1\"}\n");
  expect_input_error([&] { load_heldout(file); }, {file.string() + ":1: text: missing field", R"({"id": string, "text": string})"});
}

TEST(EvalData, MissingFileIsNamed) {
  TempDir dir;
  expect_input_error([&] { load_heldout(dir / "nope.jsonl"); }, {(dir / "nope.jsonl").string(), "not found"});
  expect_input_error([&] { load_retrieval(dir.path()); }, {dir.path().string(), "is a directory"});
}

}  // namespace
}  // namespace kvcheck
