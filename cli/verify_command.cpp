// kvcheck verify: the reference and the optimized engine side by side on the same prompts.
//
// For each prompt, the reference produces a continuation (its own greedy tokens, or with
// --feed text the held-out text that follows the prompt) and the logits of every position. The
// engine prefills the prompt and is then fed the same continuation one decode step at a time,
// so its logits line up position by position even after the two would have diverged:
//   - logits NMSE per position (the max is reported), KL(P_ref || P_engine) mean / p99 / max and
//     top-1 agreement over the decode positions (the ones that read the compressed cache);
//   - greedy match (--feed greedy only: with --feed text nothing is decoded greedily, and the
//     field is left out): at every decode position the engine's argmax equals the reference's,
//     i.e. the engine's own greedy run would have produced the reference's tokens; the first
//     position where it would not is the first divergence.
// It prints and writes the number of tokens fed after the prompts (per prompt and in total): the
// greedy continuation stops at max_position_embeddings, so it can be shorter than asked.
#include <algorithm>
#include <filesystem>
#include <optional>
#include <numeric>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/eval_files.h"
#include "cli/json_file.h"
#include "cli/output_file.h"
#include "cli/verify_prompts.h"
#include "cli/fp8_calibration.h"
#include "cli/duo_calibration.h"
#include "cli/xkv_calibration.h"
#include "oracles/engine_step_oracle.h"
#include "oracles/accuracy_metrics.h"
#include "oracles/eval_data.h"
#include "oracles/metrics.h"
#include "optimized/engine.h"
#include "reference/errors.h"
#include "reference/generate.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

void add_verify(CLI::App& app, VerifyArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "verify", "Run the reference and the optimized engine side by side: NMSE, KL, top-1, greedy match");
  cmd->add_option("--model", args.model, "Model directory or GGUF file; default: the embedded model <datasets>/models/kvcheck-tiny");
  cmd->add_option("--device", args.device, "Engine backend: cpu, cuda or cuda-resident")->capture_default_str();
  cmd->add_option("--policy", args.policy,
                  fmt::format("KV policy of the engine, NAME or NAME:KEY=VALUE,... (e.g. h2o:budget=64,recent=0.25):\n  {}",
                              fmt::join(policy_help(), "\n  ")))
      ->capture_default_str();
  cmd->add_option("--prompts", args.prompts, "Number of prompts")->capture_default_str()->check(CLI::PositiveNumber);
  cmd->add_option("--prompt-tokens", args.prompt_tokens, "Tokens per prompt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-new-tokens", args.max_new_tokens, "Decode steps per prompt")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--feed", args.feed, "greedy: the reference's greedy tokens; text: the held-out text's own tokens")
      ->capture_default_str()
      ->check(CLI::IsMember({"greedy", "text"}));
  cmd->add_option("--kv-pages", args.kv_pages, "Pages in the engine's KV pool (0: automatic)")->capture_default_str();
  cmd->add_option("--page-bytes", args.page_bytes, "Bytes per KV page")->capture_default_str();
  cmd->add_option("--threads", args.threads, "Engine CPU threads (0: every core)")->capture_default_str();
  cmd->add_option("--seed", args.seed, "Seed of the random-id prompts used when the model has no tokenizer")
      ->capture_default_str();
  cmd->add_option("--heldout", args.heldout_file,
                  "Held-out text the prompts are cut from, JSONL (default: <datasets>/eval/heldout.jsonl)");
  cmd->add_option("--retrieval", args.retrieval_file,
                  "--sweep: retrieval items, JSONL (default: <datasets>/eval/retrieval.jsonl)");
  cmd->add_flag("--verify-each-step", args.verify_each_step,
                "At every decode step, layer and kv head, check the engine's attention against exact attention over "
                "the tokens the policy holds and against the error bound around full attention (exit 3 on a "
                "violation)");
  cmd->add_flag("--list-policies", args.list_policies, "Print the registered policy names, one per line, and exit");
  cmd->add_flag("--sweep", args.sweep,
                "Accuracy sweep: every policy (each evicting one at every --sweep-budgets value) on held-out text "
                "(--prompts x --prompt-tokens + --max-new-tokens fed) and retrieval items: KV bytes vs full-fp16, KL "
                "mean +- s.e., top-1, perplexity, retrieval accuracy");
  cmd->add_option("--sweep-policies", args.sweep_policies,
                  "--sweep: comma-separated policy names or specs; a spec keeps its own commas (default: all)");
  cmd->add_option("--sweep-specs", args.sweep_specs,
                  "--sweep: more rows, full policy specs separated by ';' (e.g. 'kv-bits:k=4,v=8;leankv:high_k=4,high_v=8')")
      ->delimiter(';');
  cmd->add_option("--sweep-budgets", args.sweep_budgets, "--sweep: tokens per head, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--sweep-retrieval", args.sweep_retrieval, "--sweep: retrieval items (0: none)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--xkv-calibrate", args.xkv_calibrate,
                  "XKV's averaged allocation: prefill N held-out windows (those after the --prompts windows, "
                  "--prompt-tokens each) under the xkv --policy (e.g. xkv:budget=64), average the per-request "
                  "per-layer budgets, print them and the fixed-budget spec (xkv:layers=...); with --sweep, add "
                  "the averaged row after every xkv budget row")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--duo-calibrate", args.duo_calibrate,
                  "DuoAttention's retrieval heads: run N held-out retrieval items (beyond the --sweep-retrieval the "
                  "sweep evaluates) exactly, rank the kv heads by --duo-rank at the queries that predict an answer "
                  "(outside the duo --policy's sinks and recent window, e.g. duo:retrieval=0.25,sinks=4,recent=60), print the "
                  "ranking and the calibrated spec (duo:...,heads=...); with --sweep, add the calibrated row after "
                  "every duo budget row")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--duo-rank", args.duo_rank,
                  "--duo-calibrate's statistic: output-error (how far keeping only the sinks and window moves the "
                  "head's attention output) or far-mass (the attention outside them)")
      ->capture_default_str();
  cmd->add_option("--json", args.json, "Write the summary and per-prompt results as JSON");
}

int run_verify(const VerifyArgs& args) {
  if (args.list_policies) {
    for (const std::string& name : policy_names()) fmt::print("{}\n", name);
    return 0;
  }
  // Inputs and outputs checked before any model work.
  check_eval_files(args.heldout_file, args.retrieval_file);
  if (!args.json.empty()) check_output_file(args.json, "--json");
  if (!args.retrieval_file.empty() && !args.sweep && args.duo_calibrate == 0) {
    throw input_error("--retrieval", args.retrieval_file,
                      "applies to --sweep and --duo-calibrate (verify without them runs no retrieval items)");
  }
  if (args.sweep) {
    if (args.verify_each_step) throw input_error("--sweep", "flags", "--verify-each-step runs without --sweep");
    return run_verify_sweep(args);
  }
  if (args.duo_calibrate > 0) {
    if (args.verify_each_step || args.xkv_calibrate > 0) {
      throw input_error("--duo-calibrate", "flags", "runs without --verify-each-step and --xkv-calibrate");
    }
    return run_duo_calibrate(args);
  }
  if (args.xkv_calibrate > 0) {
    if (args.verify_each_step) {
      throw input_error("--xkv-calibrate", "flags", "--verify-each-step runs without --xkv-calibrate");
    }
    return run_xkv_calibrate(args);
  }
  const std::filesystem::path dir =
      args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  const ReferenceModel model = ReferenceModel::load(dir);
  const ModelConfig& c = model.config();
  const std::string spec = resolve_fp8_calibration(model, dir, args, args.policy);
  std::unique_ptr<Engine> engine = make_engine(model, single_request_engine_options(args, spec));
  std::string origin;
  std::filesystem::path text_file;
  const std::vector<Prompt> prompts = make_prompts(args, dir, c, origin, &text_file);
  const bool greedy_feed = args.feed == "greedy";
  const auto V = static_cast<std::size_t>(c.vocab_size);
  std::unique_ptr<EngineStepOracle> oracle;
  if (args.verify_each_step) oracle = std::make_unique<EngineStepOracle>(*engine);

  std::vector<double> kls, nmses;
  double prefill_nmse_max = 0.0;
  std::int64_t same_top = 0, positions = 0, greedy_matches = 0, fed_total = 0;
  nlohmann::json per_prompt = nlohmann::json::array();
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    const std::span<const std::int32_t> all(prompts[p].tokens);
    const std::span<const std::int32_t> prompt = all.first(static_cast<std::size_t>(args.prompt_tokens));
    // Reference: the continuation and the logits of every position.
    std::vector<std::int32_t> continuation;
    MatrixRM ref_logits;
    if (args.feed == "text") {
      continuation.assign(all.begin() + args.prompt_tokens, all.end());
      ref_logits = model.forward(all);
    } else {
      GenerateOptions go;
      go.max_new_tokens = args.max_new_tokens;
      go.stop_at_eos = false;
      go.keep_logits = true;
      GenerateResult g = generate_greedy(model, prompt, go);
      continuation = g.generated;
      ref_logits = g.logits;
    }
    if (oracle) oracle->begin(fmt::format("prompt {} ({})", p, prompts[p].source));
    EngineGenerateOptions eg;
    eg.max_new_tokens = static_cast<std::int64_t>(continuation.size());
    eg.stop_at_eos = false;
    eg.keep_logits = true;
    eg.forced = continuation;
    const EngineGenerateResult er = engine_generate(*engine, static_cast<std::int64_t>(p), prompt, eg);
    const std::int64_t P = args.prompt_tokens;
    const std::int64_t rows = std::min<std::int64_t>(ref_logits.rows(), static_cast<std::int64_t>(er.logits.size() / V));
    auto ref_row = [&](std::int64_t r) {
      return std::span<const float>(ref_logits.data() + r * static_cast<std::int64_t>(V), V);
    };
    auto eng_row = [&](std::int64_t r) { return std::span<const float>(er.logits.data() + r * static_cast<std::int64_t>(V), V); };
    double prompt_nmse = 0.0, decode_nmse = 0.0;
    for (std::int64_t r = 0; r < P - 1 && r < rows; ++r) prompt_nmse = std::max(prompt_nmse, nmse(eng_row(r), ref_row(r)));
    prefill_nmse_max = std::max(prefill_nmse_max, prompt_nmse);
    // Decode positions: row P-1 predicts the first continuation token (its logits come from the
    // prefill), rows P .. read the cache.
    std::int64_t first_divergence = -1;
    for (std::int64_t r = P - 1; r < rows; ++r) {
      const PositionComparison cmp = compare_position(ref_row(r), eng_row(r));
      const double e = nmse(eng_row(r), ref_row(r));
      decode_nmse = std::max(decode_nmse, e);
      nmses.push_back(e);
      kls.push_back(cmp.kl);
      same_top += cmp.same_top ? 1 : 0;
      ++positions;
      if (!cmp.same_top && first_divergence < 0) first_divergence = r - (P - 1);
    }
    if (first_divergence < 0) ++greedy_matches;
    const auto fed = static_cast<std::int64_t>(continuation.size());
    fed_total += fed;
    per_prompt.push_back({{"source", prompts[p].source},
                          {"prompt_tokens", P},
                          {"fed_tokens", fed},
                          {"decode_positions", rows - (P - 1)},
                          {"logits_nmse_max", decode_nmse},
                          {"prefill_logits_nmse_max", prompt_nmse},
                          {"first_divergence", first_divergence}});
    fmt::print("prompt {:>3}: fed {} tokens, nmse max {:.3e}, first divergence {}  ({})\n", p, fed, decode_nmse,
               first_divergence < 0 ? std::string("none") : std::to_string(first_divergence), prompts[p].source);
  }
  std::vector<double> sorted = kls;
  std::sort(sorted.begin(), sorted.end());
  const double kl_mean = kls.empty() ? 0.0 : std::accumulate(kls.begin(), kls.end(), 0.0) / static_cast<double>(kls.size());
  const double nmse_max = nmses.empty() ? 0.0 : *std::max_element(nmses.begin(), nmses.end());
  const double top1 = positions == 0 ? 1.0 : static_cast<double>(same_top) / static_cast<double>(positions);
  const double greedy = static_cast<double>(greedy_matches) / static_cast<double>(prompts.size());
  fmt::print("verify: {} prompts x {} tokens ({}), feed {}, policy {}, device {}\n", prompts.size(), args.prompt_tokens,
             origin, args.feed, args.policy, args.device);
  fmt::print("  fed {} tokens in all after the prompts ({})\n", fed_total,
             greedy_feed ? "the reference's greedy continuations" : "each prompt's own continuation in its source");
  if (greedy_feed) fmt::print("  greedy match fraction {:.4f}\n", greedy);
  fmt::print("  logits nmse max {:.3e} (prefill rows {:.3e})\n", nmse_max, prefill_nmse_max);
  fmt::print("  KL mean {:.3e}, p99 {:.3e}, max {:.3e}\n  top-1 agreement {:.4f} over {} positions\n", kl_mean,
             sorted.empty() ? 0.0 : percentile_sorted(sorted, 99.0), sorted.empty() ? 0.0 : sorted.back(), top1,
             positions);
  const bool fp8 = stores_fp8(*engine->policy);
  const std::int64_t saturated = engine->cache->fp8_saturated();
  if (fp8) {
    fmt::print("  fp8 saturated elements {} of {}\n", saturated, engine->cache->fp8_stored());
    if (saturated > 0) {
      fmt::print(stderr, "kvcheck: warning: {}\n",
                 fp8_saturation_warning(*engine->policy, saturated, engine->cache->fp8_stored()));
    }
  }
  if (oracle) {
    for (const std::string& line : oracle->reports()) fmt::print("  {}\n", line);
    const nlohmann::json o = oracle->summary();
    fmt::print("  per-step oracle: {} checks, {} violations (held set {}, bound {}); max error vs held set {:.3e}, "
               "max share of the bound used {:.3f}, max pruned mass {:.3e}\n",
               o["oracle_checks"].get<std::int64_t>(), o["oracle_violations"].get<std::int64_t>(),
               o["held_violations"].get<std::int64_t>(), o["bound_violations"].get<std::int64_t>(),
               o["held_error_max"].get<double>(), o["bound_use_max"].get<double>(), o["pruned_mass_max"].get<double>());
  }
  if (!args.json.empty()) {
    nlohmann::json j = {{"model", dir.string()},
                        {"policy", args.policy},
                        {"device", args.device},
                        {"feed", args.feed},
                        {"prompt_source", origin},
                        {"datasets", datasets_json(text_file, {})},
                        {"prompts", prompts.size()},
                        {"prompt_tokens", args.prompt_tokens},
                        {"max_new_tokens", args.max_new_tokens},
                        {"fed_tokens", fed_total},
                        {"positions", positions},
                        {"logits_nmse_max", nmse_max},
                        {"prefill_logits_nmse_max", prefill_nmse_max},
                        {"kl_mean", kl_mean},
                        {"kl_p99", sorted.empty() ? 0.0 : percentile_sorted(sorted, 99.0)},
                        {"kl_max", sorted.empty() ? 0.0 : sorted.back()},
                        {"top1_agreement", top1},
                        {"per_prompt", per_prompt}};
    if (greedy_feed) j["greedy_match_fraction"] = greedy;
    if (oracle) j["oracle"] = oracle->summary();
    if (fp8) {
      j["fp8_saturated"] = saturated;
      j["fp8_stored"] = engine->cache->fp8_stored();
    }
    write_json_atomically(args.json, j, "--json");
  }
  if (oracle && oracle->violations() > 0) {
    fmt::print(stderr, "kvcheck: per-step oracle: {} violation(s) under policy {}\n", oracle->violations(), args.policy);
    return 3;
  }
  return 0;
}

}  // namespace kvcheck::cli
