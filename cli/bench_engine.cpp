// kvcheck bench --engine: generation throughput of the optimized engine against the reference,
// measured side by side in one run on the same prompts (seeded random ids) and the same machine:
//   reference            batch 1, reference/generate.h's KV-cache path (the oracle, double
//                        precision, one position per step over a contiguous cache);
//   reference recompute  batch 1, the reference's full-recompute path (every step runs the whole
//                        sequence again: the "full forward" of docs/design.md §3), one request;
//   engine               batch 1, the same requests one after another;
//   engine               batch B, B requests through the scheduler, all arriving at step 0.
// Tokens/s counts generated tokens over wall time, prefill included. Ratios are engine tokens/s
// over each reference path's tokens/s.
//
// JSON: format "kvcheck-bench-engine", version 2; model, policy, threads, linear_isa,
// prompt_tokens, new_tokens, batch, seed; runs: [{name, requests, tokens, seconds, tokens_per_s}];
// ratios: {batch1, batchB} against the KV-cache reference; ratios_vs_recompute: the same against
// the full-recompute reference.
#include <chrono>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/json_file.h"
#include "kernels/cpu/dense_ops.h"
#include "optimized/engine.h"
#include "optimized/scheduler.h"
#include "reference/errors.h"
#include "reference/generate.h"
#include "reference/model.h"

namespace kvcheck::cli {

int run_engine_bench(const BenchArgs& args) {
  using Clock = std::chrono::steady_clock;
  const std::filesystem::path dir =
      args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  const ReferenceModel model = ReferenceModel::load(dir);
  const ModelConfig& c = model.config();
  if (args.prompt_tokens + args.new_tokens > c.max_position_embeddings) {
    throw input_error("--prompt-tokens", "value", "prompt plus new tokens ({}) exceed max_position_embeddings {}",
                      args.prompt_tokens + args.new_tokens, c.max_position_embeddings);
  }
  std::mt19937_64 rng(args.seed);
  std::uniform_int_distribution<std::int32_t> id(3, static_cast<std::int32_t>(c.vocab_size - 1));
  std::vector<std::vector<std::int32_t>> prompts(static_cast<std::size_t>(args.batch));
  for (auto& p : prompts) {
    p.push_back(c.bos_token_id.value_or(1) < c.vocab_size ? static_cast<std::int32_t>(c.bos_token_id.value_or(1)) : 0);
    while (static_cast<std::int64_t>(p.size()) < args.prompt_tokens) p.push_back(id(rng));
  }
  struct Run {
    std::string name;
    std::int64_t requests = 0, tokens = 0;
    double seconds = 0.0;
    double rate() const { return static_cast<double>(tokens) / seconds; }
  };
  std::vector<Run> runs;
  // Batch-1 runs use a few requests: enough for a stable rate, few enough for the slow reference.
  const std::int64_t solo = std::min<std::int64_t>(args.batch, 4);
  auto reference_run = [&](const std::string& name, std::int64_t requests, DecodePath path) {
    Run r{name, requests, 0, 0.0};
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < requests; ++i) {
      GenerateOptions go;
      go.max_new_tokens = args.new_tokens;
      go.stop_at_eos = false;
      go.path = path;
      r.tokens += static_cast<std::int64_t>(generate_greedy(model, prompts[static_cast<std::size_t>(i)], go).generated.size());
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    runs.push_back(r);
  };
  reference_run("reference batch 1", solo, DecodePath::kKVCache);
  // One request: each of its steps costs a whole prefill.
  reference_run("reference recompute", 1, DecodePath::kFullRecompute);
  EngineOptions eo;
  eo.policy = args.policy;
  eo.threads = args.threads;
  eo.batch_hint = args.batch;
  std::unique_ptr<Engine> engine = make_engine(model, eo);
  {
    Run r{"engine batch 1", solo, 0, 0.0};
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < solo; ++i) {
      EngineGenerateOptions go;
      go.max_new_tokens = args.new_tokens;
      go.stop_at_eos = false;
      r.tokens += static_cast<std::int64_t>(engine_generate(*engine, i, prompts[static_cast<std::size_t>(i)], go).generated.size());
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    runs.push_back(r);
  }
  {
    Run r{fmt::format("engine batch {}", args.batch), args.batch, 0, 0.0};
    SchedulerConfig sc;
    sc.max_batch = args.batch;
    Scheduler s(*engine->runner, sc);
    for (std::int64_t i = 0; i < args.batch; ++i) {
      s.submit({1000 + i, prompts[static_cast<std::size_t>(i)], args.new_tokens, false, 0});
    }
    const auto t0 = Clock::now();
    for (const GenerationResult& g : s.run()) {
      if (g.stop_reason == "error") throw std::runtime_error(g.error);
      r.tokens += static_cast<std::int64_t>(g.tokens.size());
    }
    r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    runs.push_back(r);
  }
  fmt::print("kvcheck bench --engine: {} ({} layers, hidden {}), policy {}, {} threads, {} linear kernel; prompts "
             "of {} tokens (seed {}), {} new tokens each\n\n",
             dir.string(), c.num_hidden_layers, c.hidden_size, args.policy, engine->backend->threads(),
             linear_isa_name(linear_rows_isa()),
             args.prompt_tokens, args.seed, args.new_tokens);
  fmt::print("{:<20} {:>9} {:>9} {:>10} {:>12}\n", "run", "requests", "tokens", "seconds", "tokens/s");
  for (const Run& r : runs) {
    fmt::print("{:<20} {:>9} {:>9} {:>10.3f} {:>12.1f}\n", r.name, r.requests, r.tokens, r.seconds, r.rate());
  }
  const Run& cached = runs[0];
  const Run& recompute = runs[1];
  const Run& solo_engine = runs[2];
  const Run& batched = runs[3];
  const double ratio1 = solo_engine.rate() / cached.rate();
  const double ratioB = batched.rate() / cached.rate();
  const double recompute1 = solo_engine.rate() / recompute.rate();
  const double recomputeB = batched.rate() / recompute.rate();
  fmt::print("\nengine / reference (KV cache) tokens/s:  batch 1 {:.1f}x, batch {} {:.1f}x (aggregate)\n", ratio1,
             args.batch, ratioB);
  fmt::print("engine / reference (recompute) tokens/s: batch 1 {:.1f}x, batch {} {:.1f}x (aggregate)\n", recompute1,
             args.batch, recomputeB);
  if (!args.json.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    for (const Run& r : runs) {
      rows.push_back({{"name", r.name}, {"requests", r.requests}, {"tokens", r.tokens}, {"seconds", r.seconds},
                      {"tokens_per_s", r.rate()}});
    }
    write_json_atomically(args.json,
                          {{"format", "kvcheck-bench-engine"},
                           {"version", 2},
                           {"model", dir.string()},
                           {"policy", args.policy},
                           {"threads", engine->backend->threads()},
                           {"linear_isa", linear_isa_name(linear_rows_isa())},
                           {"prompt_tokens", args.prompt_tokens},
                           {"new_tokens", args.new_tokens},
                           {"batch", args.batch},
                           {"seed", args.seed},
                           {"runs", rows},
                           {"ratios", {{"batch1", ratio1}, {"batchB", ratioB}}},
                           {"ratios_vs_recompute", {{"batch1", recompute1}, {"batchB", recomputeB}}}},
                          "--json");
  }
  return 0;
}

}  // namespace kvcheck::cli
