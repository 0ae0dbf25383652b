// kvcheck generate's output and teacher-forcing flags as a user runs them on the embedded model:
//   --dump-logits FILE  a path that cannot be written is exit 2 naming it and the OS's reason,
//                       before any model work; the file appears whole (no temporary left);
//   --feed-ids FILE     the ids after the prompt are FILE's, one decode step each: the reference
//                       and the optimized engine dump logits rows for exactly the same sequence,
//                       the reference's equal to its forward over that sequence given as --ids,
//                       a lossy policy's rows differ, and bad ids name FILE and their index.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "oracles/metrics.h"
#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"
#include "reference/npy.h"

namespace kvcheck {
namespace {

using testing::CliRun;
using testing::run_kvcheck;
using testing::shell_quote;

// The prompt and the fed ids: 3 + 20 positions of the embedded model (vocab 2048), ids a greedy
// run would not choose in this order.
const std::string kPrompt = "--ids 1,40,77";
const std::vector<int> kFed = {300, 9, 1200, 5, 5, 17, 640, 2047, 0, 88, 123, 456, 789, 1011, 3, 64, 900, 12, 31, 400};
constexpr std::size_t kPromptLength = 3;

// The ids written as a user would: commas, spaces and newlines mixed.
std::string feed_file_text() {
  std::string text;
  for (std::size_t i = 0; i < kFed.size(); ++i) text += std::to_string(kFed[i]) + (i % 5 == 4 ? "\n" : i % 2 ? ", " : " ");
  return text;
}

// The text after `key` up to the end of its line.
std::string line_after(const std::string& output, const std::string& key) {
  const std::size_t at = output.find(key);
  if (at == std::string::npos) return "<no '" + key + "' line>";
  const std::size_t from = at + key.size();
  return output.substr(from, output.find('\n', from) - from);
}

double row_nmse(const NpyArrayF32& a, const NpyArrayF32& ref, std::int64_t row) {
  const auto v = static_cast<std::size_t>(ref.shape[1]);
  const auto at = static_cast<std::size_t>(row) * v;
  return nmse(std::span<const float>(a.data).subspan(at, v), std::span<const float>(ref.data).subspan(at, v));
}

TEST(GenerateCli, UnwritableDumpLogitsIsBadInputBeforeAnyModelWork) {
  testing::TempDir dir;
  // The model does not exist: the output path is checked first, so the error is about it.
  CliRun r = run_kvcheck("generate --model /nonexistent-model " + kPrompt +
                         " --dump-logits /nonexistent-dir/logits.npy");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--dump-logits: /nonexistent-dir/logits.npy: cannot write: No such file or directory"),
            std::string::npos)
      << r.output;
  r = run_kvcheck("generate --model /nonexistent-model " + kPrompt + " --dump-logits " + shell_quote(dir.path()));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--dump-logits: " + dir.path().string() + ": cannot write: is a directory"), std::string::npos)
      << r.output;
  // verify --json shares the check.
  r = run_kvcheck("verify --model /nonexistent-model --json /nonexistent-dir/verify.json");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--json: /nonexistent-dir/verify.json: cannot write: No such file or directory"),
            std::string::npos)
      << r.output;
  // A writable path: the dump is there, whole, and nothing else is left beside it.
  r = run_kvcheck("generate " + kPrompt + " --max-new-tokens 4 --ignore-eos --dump-logits " + shell_quote(dir / "l.npy"));
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(read_npy_f32(dir / "l.npy").shape, (std::vector<std::int64_t>{7, 2048}));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), std::filesystem::directory_iterator()), 1);
}

TEST(GenerateCli, FedIdsGiveBothEnginesLogitsForTheSameSequence) {
  testing::TempDir dir;
  const auto ids = dir / "fed.txt";
  testing::write_file(ids, feed_file_text());
  auto run = [&](const std::string& name, const std::string& flags) {
    const CliRun r = run_kvcheck("generate " + kPrompt + " --feed-ids " + shell_quote(ids) + " --dump-logits " +
                                 shell_quote(dir / (name + ".npy")) + " " + flags);
    EXPECT_EQ(r.code, 0) << name << "\n" << r.output;
    return r;
  };
  const CliRun ref = run("reference", "");
  const CliRun fp32 = run("fp32", "--engine optimized --policy full-fp32");
  const CliRun int4 = run("int4", "--engine optimized --policy int4");
  const CliRun recompute = run("recompute", "--decode-path recompute");
  const std::string fed = fmt::format("{}", fmt::join(kFed, " "));
  for (const CliRun* r : {&ref, &fp32, &int4}) {
    EXPECT_EQ(line_after(r->output, "fed ids: "), fmt::format("{} ({} from {})", fed, kFed.size(), ids.string()));
    EXPECT_EQ(r->output.find("generated ids"), std::string::npos) << r->output;
  }
  // Both engines' own choices at each fed step, printed beside the fed ids: identical at full
  // precision, and not simply the fed ids (the feed overrides them).
  EXPECT_EQ(line_after(fp32.output, "argmax ids: "), line_after(ref.output, "argmax ids: "));
  EXPECT_NE(line_after(ref.output, "argmax ids: "), fed);

  // The same sequence given whole as the prompt: its logits rows are the reference's fed ones.
  std::string all = "1,40,77";
  for (const int id : kFed) all += "," + std::to_string(id);
  const CliRun whole = run_kvcheck("generate --ids " + all + " --max-new-tokens 0 --dump-logits " + shell_quote(dir / "whole.npy"));
  ASSERT_EQ(whole.code, 0) << whole.output;

  const NpyArrayF32 r = read_npy_f32(dir / "reference.npy");
  const std::vector<std::int64_t> shape{static_cast<std::int64_t>(kPromptLength + kFed.size()), 2048};
  ASSERT_EQ(r.shape, shape);
  for (const char* name : {"fp32", "int4", "recompute", "whole"}) {
    ASSERT_EQ(read_npy_f32(dir / (std::string(name) + ".npy")).shape, shape) << name;
  }
  const NpyArrayF32 f = read_npy_f32(dir / "fp32.npy");
  const NpyArrayF32 q = read_npy_f32(dir / "int4.npy");
  const NpyArrayF32 w = read_npy_f32(dir / "whole.npy");
  const NpyArrayF32 rc = read_npy_f32(dir / "recompute.npy");
  double int4_max = 0.0;
  for (std::int64_t row = 0; row < shape[0]; ++row) {
    EXPECT_LT(row_nmse(f, r, row), 1e-9) << "row " << row;
    EXPECT_LT(row_nmse(w, r, row), 1e-12) << "row " << row;
    EXPECT_LT(row_nmse(rc, r, row), 1e-12) << "row " << row;
    int4_max = std::max(int4_max, row_nmse(q, r, row));
  }
  // int4 keys and values: decode rows read the quantized cache and must move visibly.
  EXPECT_GT(int4_max, 1e-6) << "the int4 dump equals the reference: the policy was not applied";
}

TEST(GenerateCli, BadFedIdsNameTheFileAndIndex) {
  testing::TempDir dir;
  const auto ids = dir / "fed.txt";
  auto expect_bad = [&](const std::string& content, const std::string& needle, const std::string& flags = "") {
    testing::write_file(ids, content);
    const CliRun r = run_kvcheck("generate " + kPrompt + " --feed-ids " + shell_quote(ids) + " " + flags);
    EXPECT_EQ(r.code, 2) << content.substr(0, 40) << "\n" << r.output;
    EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
  };
  const std::string file = ids.string();
  expect_bad("5, 6, 99999", file + ": index 2: token id 99999 is outside the vocabulary [0, 2048)");
  expect_bad("5 -1", file + ": index 1: token id -1 is outside the vocabulary");
  expect_bad("5 -1", file + ": index 1:", "--engine optimized --policy int4");
  // The embedded model has 512 positions; a 3-token prompt leaves room for 509 fed ids.
  std::string long_feed;
  for (int i = 0; i < 600; ++i) long_feed += "7\n";
  expect_bad(long_feed, file + ": index 509: the prompt (3 tokens) and the ids up to this one are 513 positions, more "
                               "than max_position_embeddings 512");
  expect_bad("5 six 7", file + ": index 1: 'six' is not an integer token id");
  expect_bad("5,,7", file + ": index 1: empty item before a comma");
  expect_bad(" \n", file + ": --feed-ids: holds no token ids");
  expect_bad("5", "--max-new-tokens", "--max-new-tokens 3");
  const CliRun missing = run_kvcheck("generate " + kPrompt + " --feed-ids " + shell_quote(dir / "absent.txt"));
  EXPECT_EQ(missing.code, 2) << missing.output;
  EXPECT_NE(missing.output.find((dir / "absent.txt").string() + ": --feed-ids: cannot be read"), std::string::npos)
      << missing.output;
  // 509 ids fit exactly.
  testing::write_file(ids, long_feed.substr(0, 2 * 509));
  const CliRun full = run_kvcheck("generate " + kPrompt + " --feed-ids " + shell_quote(ids));
  EXPECT_EQ(full.code, 0) << full.output;
}

}  // namespace
}  // namespace kvcheck
