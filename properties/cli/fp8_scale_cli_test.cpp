// The fp8 policy's scales on the embedded model, as a user runs them (optimized/fp8_policy.h):
// with a one-token prompt the prompt's amax leaves most later keys and values beyond 448 x scale,
// and verify and report say how many saturated; a scale per page or a calibrated scale does not
// saturate and stays an order of magnitude closer to the reference; every mode holds to the
// per-step oracle; a page's two scales count in the bytes; bad parameters exit 2 naming them.
#include <gtest/gtest.h>

#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/cpu/kv_bytes.h"
#include "properties/support/cli_runner.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::run_kvcheck;
using testing::shell_quote;
using testing::TempDir;

json read_json_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Pages of 2 KiB hold 28 FP8 tokens of the embedded model's 32-channel heads (the 16 KiB
// default holds more than the 65 tokens these runs store, so nothing would be encoded per page).
constexpr const char* kSmallPages = " --page-bytes 2048";

// verify --feed text on 4 one-token prompts and 64 fed tokens; returns its JSON.
json verify_one_token_prompts(const TempDir& dir, const std::string& policy, const std::string& extra,
                              std::string* output = nullptr) {
  const auto out = dir / (std::to_string(std::hash<std::string>{}(policy + extra)) + ".json");
  const auto run = run_kvcheck("verify --feed text --prompts 4 --prompt-tokens 1 --max-new-tokens 64 --policy " +
                               shell_quote(policy) + extra + " --json " + shell_quote(out));
  EXPECT_EQ(run.code, 0) << policy << "\n" << run.output;
  if (output) *output = run.output;
  return read_json_file(out);
}

TEST(Fp8ScaleCli, OneTokenPromptSaturatesThePromptScaleAndThePageAndCalibratedScalesDoNot) {
  TempDir dir;
  std::string prompt_output, page_output, calibrated_output;
  const json prompt = verify_one_token_prompts(dir, "fp8", "", &prompt_output);
  const json page = verify_one_token_prompts(dir, "fp8:scale=page", kSmallPages, &page_output);
  const json calibrated = verify_one_token_prompts(dir, "fp8:scale=calibrated", "", &calibrated_output);
  // The prompt's amax: one token sets it, and the tokens after it exceed it.
  EXPECT_GT(prompt["fp8_saturated"].get<std::int64_t>(), 0);
  EXPECT_GT(prompt["fp8_stored"].get<std::int64_t>(), prompt["fp8_saturated"].get<std::int64_t>());
  EXPECT_NE(prompt_output.find("warning: fp8: "), std::string::npos) << prompt_output;
  EXPECT_NE(prompt_output.find("saturated"), std::string::npos) << prompt_output;
  // A page's own amax never saturates, and pages were encoded (not only the fp16 residual).
  EXPECT_EQ(page["fp8_saturated"], 0);
  EXPECT_GT(page["fp8_stored"].get<std::int64_t>(), 0);
  EXPECT_EQ(page_output.find("warning"), std::string::npos) << page_output;
  EXPECT_NE(calibrated_output.find("scales calibrated on 8 held-out windows"), std::string::npos) << calibrated_output;
  const double kl_prompt = prompt["kl_mean"].get<double>();
  EXPECT_GT(kl_prompt, 0.1) << "the saturation this test is about did not happen";
  EXPECT_LT(10 * page["kl_mean"].get<double>(), kl_prompt);
  EXPECT_LT(10 * calibrated["kl_mean"].get<double>(), kl_prompt);
  EXPECT_GT(page["top1_agreement"].get<double>(), prompt["top1_agreement"].get<double>());
  EXPECT_GT(calibrated["top1_agreement"].get<double>(), prompt["top1_agreement"].get<double>());
  std::cout << "KL mean on 4 one-token prompts + 64 fed tokens: fp8 " << kl_prompt << " (saturated "
            << prompt["fp8_saturated"] << " of " << prompt["fp8_stored"] << "), fp8:scale=page " << page["kl_mean"]
            << ", fp8:scale=calibrated " << calibrated["kl_mean"] << " (saturated " << calibrated["fp8_saturated"]
            << ")\n";
}

// Every scale mode under the per-step oracle, where they differ: a one-token prompt (the prompt
// scale saturating), pages encoded several times, and calibrated scales with a margin below 1
// (so that some elements saturate and the oracle follows the clamping).
TEST(Fp8ScaleCli, PerStepOracleHoldsForEveryScaleMode) {
  TempDir dir;
  int n = 0;
  for (const auto& [policy, extra] : std::vector<std::pair<std::string, std::string>>{
           {"fp8", " --prompt-tokens 1"},
           {"fp8:scale=page", std::string(" --prompt-tokens 40") + kSmallPages},
           {"fp8:scale=page", std::string(" --prompt-tokens 1") + kSmallPages},
           {"fp8:scale=calibrated", " --prompt-tokens 1"},
           {"fp8:scale=calibrated,margin=0.25", " --prompt-tokens 8"}}) {
    const auto out = dir / (std::to_string(n++) + ".json");
    const auto run = run_kvcheck("verify --verify-each-step --feed text --prompts 2 --max-new-tokens 40 --policy " +
                                 shell_quote(policy) + extra + " --json " + shell_quote(out));
    ASSERT_EQ(run.code, 0) << policy << extra << "\n" << run.output;
    const json j = read_json_file(out);
    EXPECT_EQ(j["oracle"]["oracle_checks"], 2 * 40 * 4 * 2) << policy << extra;
    EXPECT_EQ(j["oracle"]["oracle_violations"], 0) << policy << extra;
    if (policy.find("margin=0.25") != std::string::npos) {
      EXPECT_GT(j["fp8_saturated"].get<std::int64_t>(), 0) << "a quarter of the amax must saturate";
    }
  }
}

// The bytes of fp8:scale=page at the last step: the encoded pages at one byte per element plus
// their two fp32 scales, and the fp16 residual (1 .. one page of tokens) at two.
TEST(Fp8ScaleCli, PageScalesAndTheResidualCountInTheBytes) {
  TempDir dir;
  const auto out = dir / "sweep.json";
  const auto run = run_kvcheck("verify --sweep --sweep-policies fp8 --sweep-specs fp8:scale=page --prompts 2 "
                               "--prompt-tokens 48 --max-new-tokens 32 --sweep-retrieval 0" + std::string(kSmallPages) +
                               " --json " + shell_quote(out));
  ASSERT_EQ(run.code, 0) << run.output;
  const json j = read_json_file(out);
  ASSERT_EQ(j["rows"].size(), 2u);
  EXPECT_EQ(j["rows"][0]["policy"], "fp8");
  EXPECT_DOUBLE_EQ(j["rows"][0]["kv_bytes_vs_fp16"].get<double>(), 0.5);
  EXPECT_EQ(j["rows"][1]["policy"], "fp8:scale=page");
  const std::int64_t d = 32, context = 48 + 32;
  const std::int64_t page = tokens_per_page({fp8_e4m3_format(), fp8_e4m3_format()}, d, 2048);
  ASSERT_GT(page, 1);
  // A full residual is flushed before the next token is appended: it holds 1 .. page tokens.
  const std::int64_t encoded = (context - 1) / page * page;
  const double bytes = static_cast<double>(encoded * 2 * d + (context - encoded) * 4 * d + encoded / page * 8);
  EXPECT_DOUBLE_EQ(j["rows"][1]["kv_bytes_vs_fp16"].get<double>(), bytes / static_cast<double>(context * 4 * d));
}

TEST(Fp8ScaleCli, ReportCountsSaturationPerPolicyAndWarns) {
  TempDir dir;
  const auto r = run_kvcheck("report --quick --policies fp8,fp8:scale=page --prompts 2 --prompt-tokens 1 "
                             "--max-new-tokens 48 --retrieval-items 0 --oracle-prompts 0 --out " + shell_quote(dir / "r"));
  ASSERT_EQ(r.code, 0) << r.output;
  const json report = read_json_file(dir / "r" / "report.json");
  ASSERT_EQ(report["rows"].size(), 2u);
  const json& prompt = report["rows"][0];
  const json& page = report["rows"][1];
  EXPECT_EQ(prompt["policy"], "fp8");
  EXPECT_GT(prompt["fp8_saturated"].get<std::int64_t>(), 0);
  EXPECT_GT(prompt["fp8_stored"].get<std::int64_t>(), 0);
  EXPECT_EQ(page["fp8_saturated"], 0);
  EXPECT_NE(r.output.find("kvcheck report: warning: fp8: "), std::string::npos) << r.output;
  for (const char* file : {"report.md", "report.html"}) {
    const std::string text = read_text(dir / "r" / file);
    EXPECT_NE(text.find("Warning: fp8: "), std::string::npos) << file;
    EXPECT_EQ(text.find("Warning: fp8:scale=page"), std::string::npos) << file;
  }
}

TEST(Fp8ScaleCli, BadScaleParametersExitTwoNamingThem) {
  struct Case {
    std::string args, expect;
  };
  for (const Case& c : std::vector<Case>{
           {"verify --policy fp8:scale=dynamic", "parameter 'scale' must be one of prompt, calibrated, page"},
           {"verify --policy fp8:margin=2", "margin, windows, k_scales and v_scales apply to scale=calibrated"},
           {"verify --policy fp8:scale=calibrated,margin=0", "parameter 'margin'"},
           {"verify --policy fp8:scale=calibrated,k_scales=0.1/0.1,v_scales=0.1/0.1", "parameter 'k_scales' has 2 scales"},
           {"verify --policy fp8:scale=calibrated,k_scales=0.1/-1,v_scales=0.1/0.1", "parameter 'k_scales'"},
           {"verify --policy fp8:scale=calibrated,k_scales=0.1", "k_scales and v_scales are given together"},
           {"generate --engine optimized --ids 1,2,3 --policy fp8:scale=calibrated", "scale=calibrated needs its scales"},
       }) {
    const auto run = run_kvcheck(c.args + (c.args.starts_with("verify") ? " --prompts 1 --prompt-tokens 8 --max-new-tokens 2" : ""));
    EXPECT_EQ(run.code, 2) << c.args << "\n" << run.output;
    EXPECT_NE(run.output.find(c.expect), std::string::npos) << c.args << "\n" << run.output;
  }
}

}  // namespace
}  // namespace kvcheck
