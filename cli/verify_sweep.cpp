// kvcheck verify --sweep: the accuracy of every policy at several budgets on the embedded model
// (or --model), measured against the reference in one run:
//
//   text       --prompts windows of the held-out text, each --prompt-tokens of prompt and
//              --max-new-tokens of continuation fed to the engine one decode step at a time:
//              KL(P_ref || P_engine) mean and standard error, top-1 agreement, and the engine's
//              perplexity of the continuation (the reference's alongside);
//   bytes      at each prompt's last decode step, the KV bytes the cache holds for it (every
//              live token of every head at its tier's bytes per token, metadata included),
//              relative to full-fp16 holding the whole context;
//   retrieval  --sweep-retrieval items of the retrieval set (spread over tasks and lengths),
//              greedy exact match as kvcheck eval scores it, overall and per length bucket.
//
// Rows: each policy that keeps every token once, each evicting policy at each --sweep-budgets
// value (tokens per head, policy_spec_at_budget), then each --sweep-specs spec as given. Two
// kinds of row follow the row they derive from:
//   leankv-static  after every dynamic leankv row: the same tiers and window in static mode
//                  (optimized/leankv_policy.h) with static_high and static_low the dynamic run's
//                  mean high tokens per head minus the window and mean low tokens per head (at
//                  the text prompts' last step, rounded), so both hold the same bytes up to
//                  rounding on the text; the row carries the dynamic row's bytes too;
//   xkv averaged   with --xkv-calibrate N, after every xkv budget row: XKV's averaged allocation
//                  for that spec from N held-out windows after the evaluation ones
//                  (cli/xkv_calibration.h), as a fixed `layers=` spec.
// Every row reports its mean high and low tokens per head at the text prompts' last step.
// JSON: format "kvcheck-sweep", version 1.
#include <cmath>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/json_file.h"
#include "cli/verify_prompts.h"
#include "cli/xkv_calibration.h"
#include "oracles/accuracy_metrics.h"
#include "oracles/eval_data.h"
#include "optimized/engine.h"
#include "optimized/leankv_policy.h"
#include "optimized/xkv_policy.h"
#include "reference/errors.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {
namespace {

struct TextReference {
  std::vector<std::vector<float>> rows;  // per prompt: [decode positions][vocab]
  double nll = 0.0;
  std::int64_t predicted = 0;
};

struct RetrievalCase {
  RetrievalItem item;
  std::vector<std::int32_t> prompt, answer;
};

struct Config {
  std::string spec;
  std::int64_t budget = 0;  // 0: none
  bool xkv_budget_row = false;  // an xkv spec at a budget: --xkv-calibrate adds its averaged row
};

// One configuration's measurements.
struct Row {
  std::string name;  // the policy's name, every parameter spelled out
  double bytes_ratio = 0.0;
  double high_per_head = 0.0, low_per_head = 0.0;  // mean tokens per head at the last step
  DistributionSummary dist;
  double ppl = 0.0;
  AccuracyCounter overall;
  std::map<std::int64_t, AccuracyCounter> by_length;
  std::map<std::string, AccuracyCounter> by_task;
};

}  // namespace

int run_verify_sweep(const VerifyArgs& args) {
  const std::filesystem::path dir =
      args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  const ReferenceModel model = ReferenceModel::load(dir);
  const ModelConfig& c = model.config();
  const auto V = static_cast<std::size_t>(c.vocab_size);
  // The configurations, checked (InputError naming an unknown policy or a bad spec) before any work.
  std::vector<Config> configs;
  const std::vector<std::int64_t>& budgets = args.sweep_budgets;
  const std::vector<std::string> names = args.sweep_policies.empty() ? policy_names() : args.sweep_policies;
  for (const std::string& name : names) {
    if (!policy_spec_at_budget(name, 1)) {
      configs.push_back({name, 0});
      continue;
    }
    for (std::int64_t b : budgets) {
      const std::string spec = *policy_spec_at_budget(name, b);
      const bool xkv = xkv_params_of(*make_policy(spec)).has_value();
      if (xkv && args.xkv_calibrate > 0 && args.prompt_tokens < b) {
        throw input_error("--xkv-calibrate", "--sweep-budgets",
                          "budget {} exceeds --prompt-tokens {}: the sampled requests cannot take its total", b,
                          args.prompt_tokens);
      }
      configs.push_back({spec, b, xkv});
    }
  }
  for (const std::string& spec : args.sweep_specs) {
    make_policy(spec);  // InputError naming a bad spec before anything runs
    configs.push_back({spec, 0});
  }

  VerifyArgs text_args = args;
  text_args.feed = "text";
  std::string origin;
  const std::vector<Prompt> prompts = make_prompts(text_args, dir, c, origin);
  const std::int64_t P = args.prompt_tokens;

  // Reference rows of every decode position (row P-1 predicts the first fed token).
  TextReference ref;
  for (const Prompt& p : prompts) {
    const MatrixRM logits = model.forward(p.tokens);
    std::vector<float> rows;
    for (std::int64_t r = P - 1; r + 1 < static_cast<std::int64_t>(p.tokens.size()); ++r) {
      const std::span<const float> row(logits.data() + r * static_cast<std::int64_t>(V), V);
      rows.insert(rows.end(), row.begin(), row.end());
      ref.nll += token_nll(row, p.tokens[static_cast<std::size_t>(r + 1)]);
      ++ref.predicted;
    }
    ref.rows.push_back(std::move(rows));
  }

  // Retrieval items.
  std::vector<RetrievalCase> retrieval;
  const std::filesystem::path tok = dir / "tokenizer.model";
  if (args.sweep_retrieval > 0 && std::filesystem::exists(tok)) {
    const Tokenizer tokenizer = Tokenizer::load(tok);
    const std::filesystem::path file = datasets_dir() / "eval" / "retrieval.jsonl";
    for (const RetrievalItem& it : retrieval_subset(load_retrieval(file), args.sweep_retrieval)) {
      RetrievalCase rc{it, tokenizer.encode(it.prompt, true), tokenizer.encode(it.answer, false)};
      if (static_cast<std::int64_t>(rc.prompt.size() + rc.answer.size()) > c.max_position_embeddings) {
        throw input_error(file.string(), it.id, "prompt and answer ({} tokens) exceed max_position_embeddings {}",
                          rc.prompt.size() + rc.answer.size(), c.max_position_embeddings);
      }
      retrieval.push_back(std::move(rc));
    }
  }

  std::size_t derived = 0;  // leankv-static and xkv averaged rows
  for (const Config& config : configs) {
    const std::optional<LeanKvParams> lean = leankv_params_of(*make_policy(config.spec));
    derived += (lean && !lean->is_static() ? 1 : 0) + (config.xkv_budget_row && args.xkv_calibrate > 0 ? 1 : 0);
  }
  fmt::print("verify --sweep: {} configurations (+ {} derived); {} prompts x ({} + {}) tokens of {}; {} retrieval "
             "items\n",
             configs.size(), derived, prompts.size(), P, args.max_new_tokens, origin, retrieval.size());
  fmt::print("{:<44} {:>7} {:>10} {:>9} {:>7} {:>8} {:>9}\n", "policy", "bytes", "KL mean", "+-se", "top-1", "ppl",
             "retrieval");
  const double fp16_bytes_per_token = tier_bytes_per_token({fp16_format(), fp16_format()}, c.head_dim);
  nlohmann::json rows = nlohmann::json::array();
  auto measure = [&](const std::string& spec) {
    std::unique_ptr<Engine> engine = make_engine(model, single_request_engine_options(args, spec));
    Row row;
    row.name = engine->policy->name();
    // Bytes and tokens held at each head's latest decode step.
    struct Held {
      double bytes = 0.0;
      std::int64_t high = 0, low = 0;
    };
    std::map<std::pair<std::int32_t, std::int32_t>, Held> head_held;
    std::vector<LiveToken> live;
    std::vector<SlotRef> slots;
    RunnerTrace trace;
    trace.on_decode_head = [&](const DecodeHeadTrace& s) {
      engine->cache->live_tokens(s.request, s.layer, s.kv_head, live, slots);
      Held h;
      for (const SlotRef& r : slots) {
        h.bytes += tier_bytes_per_token(engine->cache->tiers()[static_cast<std::size_t>(r.tier)].tier, c.head_dim);
        ++(r.tier == 0 ? h.high : h.low);
      }
      head_held[{s.layer, s.kv_head}] = h;
    };
    engine->runner->set_trace(&trace);
    DistributionComparison dist;
    double nll = 0.0, bytes_ratio_sum = 0.0, high_sum = 0.0, low_sum = 0.0;
    std::int64_t predicted = 0;
    const double heads = static_cast<double>(c.num_hidden_layers * c.num_key_value_heads);
    for (std::size_t p = 0; p < prompts.size(); ++p) {
      const std::span<const std::int32_t> all(prompts[p].tokens);
      EngineGenerateOptions eg;
      eg.forced = all.subspan(static_cast<std::size_t>(P));
      eg.max_new_tokens = static_cast<std::int64_t>(eg.forced.size());
      eg.stop_at_eos = false;
      eg.keep_logits = true;
      head_held.clear();
      const EngineGenerateResult er =
          engine_generate(*engine, static_cast<std::int64_t>(p), all.first(static_cast<std::size_t>(P)), eg);
      const std::vector<float>& rr = ref.rows[p];
      const std::int64_t n = static_cast<std::int64_t>(rr.size() / V);
      for (std::int64_t i = 0; i < n; ++i) {
        const std::span<const float> e(er.logits.data() + (P - 1 + i) * static_cast<std::int64_t>(V), V);
        dist.add(std::span<const float>(rr.data() + i * static_cast<std::int64_t>(V), V), e);
        nll += token_nll(e, all[static_cast<std::size_t>(P + i)]);
        ++predicted;
      }
      double held = 0.0;
      for (const auto& [head, h] : head_held) {
        held += h.bytes;
        high_sum += static_cast<double>(h.high) / heads;
        low_sum += static_cast<double>(h.low) / heads;
      }
      // The last decode step added the last fed token: the context is the whole window.
      const double context = static_cast<double>(all.size());
      bytes_ratio_sum += held / (context * heads * fp16_bytes_per_token);
    }
    engine->runner->set_trace(nullptr);
    for (std::size_t i = 0; i < retrieval.size(); ++i) {
      const RetrievalCase& rc = retrieval[i];
      EngineGenerateOptions eg;
      eg.max_new_tokens = static_cast<std::int64_t>(rc.answer.size());
      eg.stop_at_eos = false;
      const EngineGenerateResult er = engine_generate(*engine, 100000 + static_cast<std::int64_t>(i), rc.prompt, eg);
      const bool ok = exact_match(er.generated, rc.answer);
      row.overall.add(ok);
      row.by_length[rc.item.length_bucket].add(ok);
      row.by_task[rc.item.task].add(ok);
    }
    row.dist = dist.summary();
    row.ppl = perplexity(nll, predicted);
    const double count = static_cast<double>(prompts.size());
    row.bytes_ratio = bytes_ratio_sum / count;
    row.high_per_head = high_sum / count;
    row.low_per_head = low_sum / count;
    return row;
  };
  auto emit = [&](const Row& row, const std::string& spec, std::int64_t budget, const nlohmann::json& extra) {
    fmt::print("{:<44} {:>7.3f} {:>10.3e} {:>9.1e} {:>7.4f} {:>8.2f} {:>9}\n", row.name, row.bytes_ratio,
               row.dist.kl_mean, row.dist.kl_stderr, row.dist.top1_agreement, row.ppl,
               row.overall.total ? fmt::format("{:.3f}", row.overall.accuracy()) : std::string("-"));
    nlohmann::json lengths = nlohmann::json::object(), tasks = nlohmann::json::object();
    for (const auto& [len, a] : row.by_length) lengths[std::to_string(len)] = a.accuracy();
    for (const auto& [task, a] : row.by_task) tasks[task] = a.accuracy();
    nlohmann::json j = {
        {"policy", row.name},
        {"spec", spec},
        {"budget", budget == 0 ? nlohmann::json(nullptr) : nlohmann::json(budget)},
        {"kv_bytes_vs_fp16", row.bytes_ratio},
        {"high_tokens_per_head", row.high_per_head},
        {"low_tokens_per_head", row.low_per_head},
        {"kl_mean", row.dist.kl_mean},
        {"kl_stderr", row.dist.kl_stderr},
        {"kl_p99", row.dist.kl_p99},
        {"top1_agreement", row.dist.top1_agreement},
        {"perplexity", row.ppl},
        {"retrieval_items", row.overall.total},
        {"retrieval_accuracy", row.overall.total ? nlohmann::json(row.overall.accuracy()) : nlohmann::json(nullptr)},
        {"retrieval_accuracy_by_length", lengths},
        {"retrieval_accuracy_by_task", tasks}};
    j.update(extra);
    rows.push_back(j);
  };
  for (const Config& config : configs) {
    const Row row = measure(config.spec);
    emit(row, config.spec, config.budget, nlohmann::json::object());
    const std::optional<LeanKvParams> lean = leankv_params_of(*make_policy(config.spec));
    if (lean && !lean->is_static()) {
      // Equal static per-head budgets holding the dynamic run's mean tokens per head.
      LeanKvParams fixed = *lean;
      fixed.static_high = std::max<std::int64_t>(0, std::llround(row.high_per_head) - lean->window);
      fixed.static_low = std::max<std::int64_t>(0, std::llround(row.low_per_head));
      const std::string spec = make_leankv_policy(fixed)->name();
      const Row st = measure(spec);
      emit(st, spec, config.budget,
           {{"static_of", row.name}, {"dynamic_kv_bytes_vs_fp16", row.bytes_ratio}});
    }
    if (config.xkv_budget_row && args.xkv_calibrate > 0) {
      const XkvCalibration cal = calibrate_xkv(model, dir, args, config.spec);
      const Row av = measure(cal.spec);
      emit(av, cal.spec, config.budget,
           {{"averaged_from", cal.from_spec}, {"calibration_prompts", cal.sources.size()}, {"layers", cal.layers}});
    }
  }
  const double ref_ppl = perplexity(ref.nll, ref.predicted);
  fmt::print("reference perplexity of the same continuations: {:.2f}\n", ref_ppl);
  if (!args.json.empty()) {
    write_json_atomically(args.json,
                          {{"format", "kvcheck-sweep"},
                           {"version", 1},
                           {"model", dir.string()},
                           {"prompt_source", origin},
                           {"prompts", prompts.size()},
                           {"prompt_tokens", P},
                           {"continuation_tokens", args.max_new_tokens},
                           {"retrieval_items", retrieval.size()},
                           {"budgets", budgets},
                           {"reference_perplexity", ref_ppl},
                           {"rows", rows}},
                          "--json");
  }
  return 0;
}

}  // namespace kvcheck::cli
