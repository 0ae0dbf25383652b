// A user's own evaluation files in verify, verify --sweep and report (--heldout FILE,
// --retrieval FILE): the prompts and retrieval items come from them, the JSON names them with
// their hashes, the report refuses a baseline made on other data, and a malformed line is exit 2
// naming FILE:LINE before any model work.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::CliRun;
using testing::run_kvcheck;
using testing::shell_quote;

// Lines of a datasets/eval file, parsed.
std::vector<json> dataset_lines(const std::string& name) {
  std::ifstream in(testing::source_path("datasets/eval/" + name));
  std::vector<json> out;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

// A user's files: two held-out documents from the middle of the shipped set and three retrieval
// items of different tasks, all under ids of their own ("mine-...").
struct UserFiles {
  testing::TempDir dir;
  std::filesystem::path heldout = dir / "my-heldout.jsonl", retrieval = dir / "my-retrieval.jsonl";
  UserFiles() {
    const std::vector<json> docs = dataset_lines("heldout.jsonl");
    std::string text;
    for (std::size_t i : {docs.size() / 2, docs.size() / 2 + 1}) {
      json d = docs[i];
      d["id"] = "mine-doc-" + std::to_string(i);
      text += d.dump() + "\n";
    }
    testing::write_file(heldout, text);
    const std::vector<json> items = dataset_lines("retrieval.jsonl");
    text.clear();
    std::vector<std::string> tasks;
    for (const json& it : items) {
      const std::string task = it["task"].get<std::string>();
      if (it["length_bucket"] != 128 || std::find(tasks.begin(), tasks.end(), task) != tasks.end()) continue;
      tasks.push_back(task);
      json mine = it;
      mine["id"] = "mine-" + task;
      text += mine.dump() + "\n";
      if (tasks.size() == 3) break;
    }
    testing::write_file(retrieval, text);
  }
  std::string flags() const { return " --heldout " + shell_quote(heldout) + " --retrieval " + shell_quote(retrieval); }
};

json read_json(const std::filesystem::path& p) { return json::parse(testing::read_file(p)); }

TEST(EvalFilesCli, VerifyCutsItsPromptsFromTheHeldoutFileAndRecordsIt) {
  UserFiles f;
  const auto out = f.dir / "verify.json";
  const CliRun r = run_kvcheck("verify --feed text --prompts 2 --prompt-tokens 32 --max-new-tokens 8 --heldout " +
                               shell_quote(f.heldout) + " --json " + shell_quote(out));
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = read_json(out);
  EXPECT_EQ(j["prompt_source"], f.heldout.string());
  EXPECT_EQ(j["datasets"]["heldout"], f.heldout.string());
  EXPECT_FALSE(j["datasets"].contains("retrieval")) << "plain verify reads no retrieval items";
  const auto hash = j["datasets"]["heldout_hash"].get<std::string>();
  ASSERT_EQ(hash.size(), 16u);
  for (const json& p : j["per_prompt"]) {
    EXPECT_TRUE(p["source"].get<std::string>().starts_with("heldout mine-doc-")) << p.dump();
  }
  // The default file has another hash: the field is the file's, not a constant.
  const CliRun d = run_kvcheck("verify --feed text --prompts 1 --prompt-tokens 32 --max-new-tokens 8 --json " +
                               shell_quote(f.dir / "default.json"));
  ASSERT_EQ(d.code, 0) << d.output;
  EXPECT_NE(read_json(f.dir / "default.json")["datasets"]["heldout_hash"], hash);
  EXPECT_EQ(read_json(f.dir / "default.json")["datasets"]["heldout"],
            testing::source_path("datasets/eval/heldout.jsonl").string());
}

TEST(EvalFilesCli, SweepScoresTheRetrievalFileAsEvalDoes) {
  UserFiles f;
  const auto out = f.dir / "sweep.json";
  const CliRun r = run_kvcheck("verify --sweep --sweep-policies full-fp32 --prompts 1 --prompt-tokens 32 "
                               "--max-new-tokens 8 --sweep-retrieval 50" + f.flags() + " --json " + shell_quote(out));
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = read_json(out);
  EXPECT_EQ(j["retrieval_items"], 3) << "the user's file holds 3 items";
  EXPECT_EQ(j["prompt_source"], f.heldout.string());
  EXPECT_EQ(j["datasets"]["heldout"], f.heldout.string());
  EXPECT_EQ(j["datasets"]["retrieval"], f.retrieval.string());
  EXPECT_EQ(j["datasets"]["retrieval_hash"].get<std::string>().size(), 16u);
  const json& row = j["rows"][0];
  EXPECT_EQ(row["retrieval_items"], 3);
  std::vector<std::string> tasks;
  for (const auto& [task, unused] : row["retrieval_accuracy_by_task"].items()) tasks.push_back(task);
  EXPECT_EQ(tasks.size(), 3u);
  const CliRun e = run_kvcheck("eval --task retrieval --quiet --retrieval " + shell_quote(f.retrieval) + " --json " +
                               shell_quote(f.dir / "eval.json"));
  ASSERT_EQ(e.code, 0) << e.output;
  EXPECT_EQ(row["retrieval_accuracy"], read_json(f.dir / "eval.json")["retrieval_accuracy"]);
}

TEST(EvalFilesCli, ReportUsesTheFilesAndRefusesABaselineOfOtherData) {
  UserFiles f;
  const std::string out = " --out " + shell_quote(f.dir / "r");
  CliRun r = run_kvcheck("report --quick --quiet --policies full-fp16" + f.flags() + out);
  ASSERT_EQ(r.code, 0) << r.output;
  const json j = read_json(f.dir / "r" / "report.json");
  EXPECT_EQ(j["datasets"]["heldout"], f.heldout.string());
  EXPECT_EQ(j["datasets"]["retrieval"], f.retrieval.string());
  EXPECT_EQ(j["datasets"]["heldout_hash"], j["settings"]["heldout_hash"]);
  EXPECT_EQ(j["reference"]["prompt_source"], f.heldout.string());
  EXPECT_EQ(j["settings"]["retrieval_items"], 3);
  EXPECT_EQ(j["rows"][0]["retrieval_items"], 3);

  // The committed baseline was made on the shipped files: refused, naming what differs.
  const std::string baseline = shell_quote(testing::source_path("datasets/baselines/report-quick-kvcheck-tiny.json"));
  r = run_kvcheck("report --quick --quiet --policies full-fp16 --heldout " + shell_quote(f.heldout) + " --baseline " +
                  baseline + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("settings: the baseline was made with other settings or data (heldout_hash: baseline \""),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("retrieval_hash"), std::string::npos) << "only the held-out file differs\n" << r.output;
  r = run_kvcheck("report --quick --quiet --policies full-fp16 --retrieval " + shell_quote(f.retrieval) + " --baseline " +
                  baseline + out);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("retrieval_hash: baseline"), std::string::npos) << r.output;
}

TEST(EvalFilesCli, MalformedFilesAreNamedWithTheirLineBeforeAnyModelWork) {
  UserFiles f;
  const auto bad_heldout = f.dir / "bad-heldout.jsonl", bad_retrieval = f.dir / "bad-retrieval.jsonl";
  testing::write_file(bad_heldout, "{\"id\": \"a\", \"text\": \"fine\"}\n{\"id\": \"b\"}\n");
  testing::write_file(bad_retrieval, "{\"id\": \"a\", \"task\": \"kv\", \"length_bucket\": 128, \"prompt\": \"p\", "
                                     "\"answer\": \"x\"}\nnot json\n");
  // The model does not exist: the data files are read first, so the error is about them.
  const std::string model = " --model /nonexistent-model";
  for (const std::string& command : {std::string("verify"), std::string("verify --sweep"), std::string("report --quick --out ") +
                                                                                                 shell_quote(f.dir / "r")}) {
    CliRun r = run_kvcheck(command + model + " --heldout " + shell_quote(bad_heldout));
    EXPECT_EQ(r.code, 2) << command << "\n" << r.output;
    EXPECT_NE(r.output.find(bad_heldout.string() + ":2: text: missing"), std::string::npos) << command << "\n" << r.output;
    if (command == "verify") continue;  // plain verify takes no --retrieval (below)
    r = run_kvcheck(command + model + " --retrieval " + shell_quote(bad_retrieval));
    EXPECT_EQ(r.code, 2) << command << "\n" << r.output;
    EXPECT_NE(r.output.find(bad_retrieval.string() + ":2:"), std::string::npos) << command << "\n" << r.output;
  }
  CliRun r = run_kvcheck("verify --retrieval " + shell_quote(f.retrieval));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--retrieval: " + f.retrieval.string() + ": applies to --sweep"), std::string::npos) << r.output;

  // A model without a tokenizer cannot read text: naming a file for it is refused, not ignored.
  ASSERT_EQ(run_kvcheck("make-model --random --layers 1 --hidden 32 --heads 2 --kv-heads 1 --vocab 300 --seed 2 --out " +
                        shell_quote(f.dir / "m"))
                .code,
            0);
  r = run_kvcheck("verify --model " + shell_quote(f.dir / "m") + " --heldout " + shell_quote(f.heldout));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--heldout: " + f.heldout.string() + ": needs the model's tokenizer"), std::string::npos)
      << r.output;
  r = run_kvcheck("verify --sweep --sweep-policies full-fp16 --model " + shell_quote(f.dir / "m") + " --retrieval " +
                  shell_quote(f.retrieval));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--retrieval: " + f.retrieval.string() + ": needs the model's tokenizer"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace kvcheck
