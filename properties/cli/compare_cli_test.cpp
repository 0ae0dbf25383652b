// kvcheck export / kvcheck compare as a user runs them (docs/reports.md, "Checking another engine"):
//   consistency  kvcheck's own engine, written in the engine output format (.npy directory,
//                safetensors), gives compare rows equal to report's rows for the same policy to
//                1e-12 relative: two paths, one answer;
//   top-k        on the same dumps, the top-k KL is at most the full KL at every position, equal
//                when k = vocab, and is labelled a lower bound in every output;
//   faults       a shifted position, swapped items and a temperature of 1.1 are flagged by the gate
//                against a baseline of the clean output; a NaN row, a truncated file, a wrong
//                vocabulary or position count, a missing or unexported item, an items file of
//                another model or edited after export are bad input (exit 2) naming file and item.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/engine_compare.h"
#include "cli/engine_output.h"
#include "cli/items_file.h"
#include "cli/report_reference_cache.h"
#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"
#include "reference/model.h"
#include "reference/npy.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::run_kvcheck;
using testing::shell_quote;

constexpr const char* kPolicy = "h2o";
constexpr std::int64_t kBudget = 32;

class CompareCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<testing::TempDir>();
    const auto q = [](const std::string& name) { return shell_quote(path(name)); };
    ASSERT_EQ(run_kvcheck(fmt::format("export --quick --out {}", q("items.jsonl"))).code, 0);
    const testing::CliRun report = run_kvcheck(fmt::format("report --quick --policies {} --budgets {} --oracle-prompts 0 --quiet "
                                                           "--out {} --cache {}", kPolicy, kBudget, q("report"), q("cache")));
    ASSERT_EQ(report.code, 0) << report.output;
    report_row_ = json::parse(testing::read_file(path("report/report.json"))).at("rows").at(0);
    spec_ = report_row_.at("spec").get<std::string>();
    for (const auto& [out, extra] : std::vector<std::pair<std::string, std::string>>{
             {"h2o", ""}, {"h2o.safetensors", ""}, {"h2o-top5.jsonl", "--top-k 5"}, {"h2o-topall.jsonl", "--top-k 100000"}}) {
      const testing::CliRun w = run_kvcheck(fmt::format("compare --items {} --write-engine-output {} --policy {} {} --cache {}",
                                                        q("items.jsonl"), q(out), shell_quote(spec_), extra, q("cache")));
      ASSERT_EQ(w.code, 0) << w.output;
    }
    const testing::CliRun clean = run_kvcheck(fmt::format("compare --items {} --write-engine-output {} --policy full-fp16 --cache {}",
                                                          q("items.jsonl"), q("clean"), q("cache")));
    ASSERT_EQ(clean.code, 0) << clean.output;
  }
  static void TearDownTestSuite() { dir_.reset(); }

  static std::filesystem::path path(const std::string& name) { return dir_->path() / name; }
  static std::string q(const std::string& name) { return shell_quote(path(name)); }

  // kvcheck compare of one engine output against the items, into OUT, with extra flags.
  static testing::CliRun compare(const std::string& output, const std::string& out, const std::string& extra = "") {
    return run_kvcheck(fmt::format("compare --items {} --engine-output {} --name engine --out {} --cache {} --quiet {}", q("items.jsonl"),
                                   q(output), q(out), q("cache"), extra));
  }

  static std::unique_ptr<testing::TempDir> dir_;
  static json report_row_;
  static std::string spec_;
};
std::unique_ptr<testing::TempDir> CompareCli::dir_;
json CompareCli::report_row_;
std::string CompareCli::spec_;

void expect_rel(const json& a, const json& b, const char* key, double rel) {
  const double x = a.at(key).get<double>(), y = b.at(key).get<double>();
  EXPECT_LE(std::abs(x - y), rel * std::max(std::abs(x), std::abs(y)) + 1e-300) << key << ": " << x << " vs " << y;
}

TEST_F(CompareCli, OwnEngineThroughTheFormatEqualsReport) {
  const testing::CliRun run = run_kvcheck(fmt::format(
      "compare --items {} --engine-output {} --name via-npy --engine-output {} --name via-safetensors --policies {} --budgets {} "
      "--oracle-prompts 0 --out {} --cache {} --quiet", q("items.jsonl"), q("h2o"), q("h2o.safetensors"), kPolicy, kBudget, q("same"),
      q("cache")));
  ASSERT_EQ(run.code, 0) << run.output;
  const json rows = json::parse(testing::read_file(path("same/report.json"))).at("rows");
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].at("policy"), "via-npy");
  EXPECT_EQ(rows[1].at("kl_kind"), "full");
  for (const json& row : rows) {
    for (const char* key : {"kl_mean", "kl_stderr", "kl_p999", "kl_p99", "kl_p95", "kl_p90", "kl_p50", "kl_max", "top1_agreement",
                            "rms_delta_p", "perplexity", "perplexity_ratio", "retrieval_accuracy"}) {
      expect_rel(row, report_row_, key, 1e-12);
    }
    EXPECT_EQ(row.at("retrieval_items"), report_row_.at("retrieval_items"));
    EXPECT_EQ(row.at("retrieval_accuracy_by_length"), report_row_.at("retrieval_accuracy_by_length"));
    EXPECT_EQ(row.at("retrieval_accuracy_by_task"), report_row_.at("retrieval_accuracy_by_task"));
  }
  EXPECT_GT(report_row_.at("kl_mean").get<double>(), 0.0);  // an evicting policy: something to agree on
  EXPECT_GE(report_row_.at("retrieval_items").get<std::int64_t>(), 1);
  const std::string md = testing::read_file(path("same/report.md"));
  // Another engine's row has no KV bytes: shown as "-", never as "nan".
  EXPECT_NE(md.find("| `via-safetensors` | - |"), std::string::npos) << md;
  EXPECT_EQ(md.find("nan"), std::string::npos) << md;
  EXPECT_TRUE(std::filesystem::exists(path("same/report.html")));
  EXPECT_EQ(testing::read_file(path("same/report.html")).find(">nan<"), std::string::npos);
}

TEST_F(CompareCli, TopkKlIsALowerBoundAtEveryPositionAndLabelled) {
  const ReferenceModel model = ReferenceModel::load(testing::source_path("datasets/models/kvcheck-tiny"));
  const cli::ItemsFile items =
      cli::read_items_file(path("items.jsonl"), model.config(), cli::model_hash(testing::source_path("datasets/models/kvcheck-tiny")));
  const cli::EngineOutput full = cli::read_engine_output(path("h2o"));
  const cli::EngineOutput top5 = cli::read_engine_output(path("h2o-top5.jsonl"));
  const cli::EngineOutput all = cli::read_engine_output(path("h2o-topall.jsonl"));
  const auto V = static_cast<std::size_t>(model.config().vocab_size);
  const auto P = static_cast<std::size_t>(items.inputs.prompt_tokens);
  std::int64_t positions = 0, strictly_below = 0;
  for (std::size_t p = 0; p < items.text_ids.size(); ++p) {
    const std::vector<std::int32_t>& tokens = items.inputs.prompts[p].tokens;
    const MatrixRM logits = model.forward(tokens);
    const cli::EngineItem& f = full.items.at(items.text_ids[p]);
    for (std::int64_t i = 0; i < f.positions; ++i) {
      const std::span<const float> ref(logits.data() + (P - 1 + static_cast<std::size_t>(i)) * V, V);
      const std::span<const float> eng(f.logits.data() + static_cast<std::size_t>(i) * V, V);
      const double kl = kl_divergence(ref, eng);
      const double k5 = cli::compare_position_topk(ref, top5.items.at(items.text_ids[p]).topk[static_cast<std::size_t>(i)]).kl;
      const double kv = cli::compare_position_topk(ref, all.items.at(items.text_ids[p]).topk[static_cast<std::size_t>(i)]).kl;
      EXPECT_LE(k5, kl + 1e-12) << "item " << p << " position " << i;
      EXPECT_NEAR(kv, kl, 1e-12 + 1e-9 * kl) << "item " << p << " position " << i;
      strictly_below += k5 < kl - 1e-12;
      ++positions;
    }
  }
  EXPECT_GT(strictly_below, 0) << "top-5 never lost anything: the bound is not exercised";
  const testing::CliRun run = run_kvcheck(fmt::format(
      "compare --items {} --engine-output {} --name top5 --engine-output {} --name full --out {} --cache {} --quiet", q("items.jsonl"),
      q("h2o-top5.jsonl"), q("h2o"), q("topk"), q("cache")));
  ASSERT_EQ(run.code, 0) << run.output;
  const json rows = json::parse(testing::read_file(path("topk/report.json"))).at("rows");
  EXPECT_EQ(rows[0].at("policy"), "top5 [top-5 KL: a lower bound]");
  EXPECT_EQ(rows[0].at("kl_kind"), "top-k lower bound");
  EXPECT_LE(rows[0].at("kl_mean").get<double>(), rows[1].at("kl_mean").get<double>());
  const double coverage = rows[0].at("reference_topk_coverage").get<double>();
  EXPECT_GT(coverage, 0.0);
  EXPECT_LE(coverage, 1.0);
  EXPECT_EQ(rows[0].at("top1_agreement"), rows[1].at("top1_agreement"));  // the top token is among the 5
  for (const char* file : {"topk/report.md", "topk/report.html"}) {
    const std::string text = testing::read_file(path(file));
    EXPECT_NE(text.find("a lower bound of the full KL"), std::string::npos) << file;
    EXPECT_NE(text.find("top-5 KL: a lower bound"), std::string::npos) << file;
  }
}

// Reads ITEM.npy of a copy of the clean output, changes it, writes it back.
void edit_npy(const std::filesystem::path& file, const std::function<void(cli::LogitsArray&)>& edit) {
  cli::LogitsArray a = cli::read_logits_npy(file, "test");
  edit(a);
  write_npy_f32(file, a.rows, a.cols, a.data);
}

TEST_F(CompareCli, PlantedFaultsAreFlaggedByTheGate) {
  const testing::CliRun base = compare("clean", "base", "--baseline " + q("baseline.json") + " --update-baseline");
  ASSERT_EQ(base.code, 0) << base.output;
  ASSERT_EQ(compare("clean", "again", "--baseline " + q("baseline.json")).code, 0);
  const std::vector<std::pair<std::string, std::function<void(const std::filesystem::path&)>>> faults = {
      {"shifted position", [](const std::filesystem::path& d) {
         edit_npy(d / "text-0.npy", [](cli::LogitsArray& a) {
           std::copy(a.data.begin() + a.cols, a.data.end(), a.data.begin());  // row i <- row i + 1
         });
       }},
      {"swapped items", [](const std::filesystem::path& d) {
         std::filesystem::rename(d / "text-0.npy", d / "tmp.npy");
         std::filesystem::rename(d / "text-1.npy", d / "text-0.npy");
         std::filesystem::rename(d / "tmp.npy", d / "text-1.npy");
       }},
      {"temperature 1.1", [](const std::filesystem::path& d) {
         for (const char* f : {"text-0.npy", "text-1.npy"}) {
           edit_npy(d / f, [](cli::LogitsArray& a) {
             for (float& x : a.data) x /= 1.1f;
           });
         }
       }},
  };
  for (const auto& [name, plant] : faults) {
    const std::filesystem::path d = path("fault-" + std::to_string(&name - &faults[0].first));
    std::filesystem::copy(path("clean"), d);
    plant(d);
    const testing::CliRun r = compare(d.filename().string(), d.filename().string() + "-out", "--baseline " + q("baseline.json"));
    EXPECT_EQ(r.code, 1) << name << "\n" << r.output;
    EXPECT_NE(r.output.find("REGRESSED"), std::string::npos) << name;
    EXPECT_NE(r.output.find("kl_mean"), std::string::npos) << name;
  }
}

TEST_F(CompareCli, BrokenOutputsAreBadInputNamingFileItemAndPosition) {
  struct Case {
    std::string name;
    std::function<void(const std::filesystem::path&)> plant;
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"nan row", [](const std::filesystem::path& d) { edit_npy(d / "text-1.npy", [](cli::LogitsArray& a) { a.data[3 * a.cols + 7] = NAN; }); },
       {"text-1.npy", "position 3", "token 7", "NaN"}},
      {"truncated", [](const std::filesystem::path& d) {
         const std::string bytes = testing::read_file(d / "text-0.npy");
         testing::write_file(d / "text-0.npy", bytes.substr(0, bytes.size() - 10));
       }, {"text-0.npy", "truncated"}},
      {"wrong vocabulary", [](const std::filesystem::path& d) {
         edit_npy(d / "text-0.npy", [](cli::LogitsArray& a) {
           std::vector<float> wider;
           for (std::int64_t r = 0; r < a.rows; ++r) {
             wider.insert(wider.end(), a.data.begin() + r * a.cols, a.data.begin() + (r + 1) * a.cols);
             wider.push_back(0.0f);
           }
           a.data = wider;
           ++a.cols;
         });
       }, {"text-0", "vocabulary of", "the model's is"}},
      {"wrong positions", [](const std::filesystem::path& d) { edit_npy(d / "text-1.npy", [](cli::LogitsArray& a) { --a.rows; a.data.resize(static_cast<std::size_t>(a.rows * a.cols)); }); },
       {"text-1", "31 positions", "32 continuation tokens"}},
      {"missing item", [](const std::filesystem::path& d) { std::filesystem::remove(d / "text-1.npy"); }, {"text-1", "missing"}},
      {"missing retrieval", [](const std::filesystem::path& d) { std::filesystem::remove(d / "generated.jsonl"); }, {"retrieval-", "missing"}},
      {"unexported item", [](const std::filesystem::path& d) { std::filesystem::copy_file(d / "text-0.npy", d / "text-7.npy"); },
       {"text-7", "not exported"}},
      {"top-k above 0", [](const std::filesystem::path& d) {
         testing::write_file(d / "extra.jsonl", R"({"id": "text-0", "top_logprobs": [{"3": 0.25}]})" "\n");
       }, {"extra.jsonl:1", "text-0", "top_logprobs[0]", "above 0"}},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::filesystem::path d = path("broken-" + std::to_string(i));
    std::filesystem::copy(path("clean"), d);
    cases[i].plant(d);
    const testing::CliRun r = compare(d.filename().string(), d.filename().string() + "-out");
    EXPECT_EQ(r.code, 2) << cases[i].name << "\n" << r.output;
    for (const std::string& n : cases[i].needles) EXPECT_NE(r.output.find(n), std::string::npos) << cases[i].name << ": " << n << "\n" << r.output;
  }
}

TEST_F(CompareCli, ItemsOfAnotherModelOrEditedAreRefused) {
  std::string items = testing::read_file(path("items.jsonl"));
  const std::size_t at = items.find("\"model_hash\":\"") + 14;
  std::string other = items;
  other[at] = other[at] == '0' ? '1' : '0';
  testing::write_file(path("other-model.jsonl"), other);
  testing::CliRun r = run_kvcheck(fmt::format("compare --items {} --engine-output {} --name e --out {}", q("other-model.jsonl"), q("clean"), q("x")));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("other-model.jsonl:1: model_hash"), std::string::npos) << r.output;
  std::string edited = items;  // one continuation id changed: the count stays, the hash does not
  const std::size_t ids = edited.find("\"continuation_ids\":[") + 20;
  edited[ids] = edited[ids] == '1' ? '2' : '1';
  testing::write_file(path("edited.jsonl"), edited);
  r = run_kvcheck(fmt::format("compare --items {} --engine-output {} --name e --out {}", q("edited.jsonl"), q("clean"), q("x")));
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("items_hash"), std::string::npos) << r.output;
}

TEST_F(CompareCli, ExportHoldsTheReportsWindowsAndItems) {
  const json header = json::parse(testing::read_file(path("items.jsonl")).substr(0, testing::read_file(path("items.jsonl")).find('\n')));
  EXPECT_EQ(header.at("format"), "kvcheck-items");
  EXPECT_EQ(header.at("settings").at("prompts"), 2);
  EXPECT_EQ(header.at("settings").at("prompt_tokens"), 64);
  EXPECT_EQ(header.at("settings").at("continuation_tokens"), 32);
  const json settings = json::parse(testing::read_file(path("report/report.json"))).at("settings");
  for (const char* key : {"model_hash", "heldout_hash", "retrieval_hash"}) EXPECT_EQ(header.at(key), settings.at(key)) << key;
  EXPECT_EQ(header.at("settings").at("retrieval_items"), settings.at("retrieval_items"));
}

// A float16 .npy (what torch's half logits save as) reads as the same values; the top-k parser
// refuses probabilities that sum above 1 + 1e-3, naming file, item and position.
TEST(EngineOutputParsers, Float16NpyAndTopkNormalisation) {
  const testing::TempDir dir;
  std::string header = "{'descr': '<f2', 'fortran_order': False, 'shape': (2, 2), }";
  header.append(64 - (10 + header.size() + 1) % 64, ' ');
  header.push_back('\n');
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8) + static_cast<char>(header.size()) + '\0' + header;
  for (const unsigned h : {0x3C00u, 0xC000u, 0x3800u, 0x4400u}) bytes += std::string{static_cast<char>(h & 0xffu), static_cast<char>(h >> 8)};
  testing::write_file(dir / "half.npy", bytes);
  const cli::LogitsArray a = cli::read_logits_npy(dir / "half.npy", "half");
  EXPECT_EQ(a.rows, 2);
  EXPECT_EQ(a.cols, 2);
  EXPECT_EQ(a.data, (std::vector<float>{1.0f, -2.0f, 0.5f, 4.0f}));
  testing::write_file(dir / "t.jsonl", R"({"id": "text-3", "top_logprobs": [{"1": -0.1}, {"4": -0.1, "9": -0.5}]})" "\n");
  cli::EngineOutput out;
  testing::expect_input_error([&] { cli::read_engine_jsonl(dir / "t.jsonl", out); },
                              {"t.jsonl:1", "text-3", "top_logprobs[1]", "position 1", "sum to"});
}

}  // namespace
}  // namespace kvcheck
