// kvcheck bench --engine: generation throughput of the optimized engine against the reference,
// measured side by side in one run on the same prompts (seeded random ids) and the same machine:
//   reference            batch 1, reference/generate.h's KV-cache path (the oracle, double
//                        precision, one position per step over a contiguous cache);
//   reference recompute  batch 1, the reference's full-recompute path (every step runs the whole
//                        sequence again: the "full forward" of docs/design.md §3), one request;
//   engine               batch 1, the same requests one after another through the scheduler;
//   engine               batch B, B requests through the scheduler, all arriving at step 0.
// Each run is repeated --repeat times (every configuration once per round, in this order); rates
// are the mean and the sample standard deviation over the rounds.
// Tokens/s counts generated tokens over wall time, prefill included. For the engine, as llama-bench
// does, also prompt processing (pp: prompt tokens over the prefill's time) and generation (tg:
// tokens the decode steps produced over the steps' time outside prefill). Ratios are engine
// tokens/s over each reference path's tokens/s (means).
// The engine runs with the step timers on (optimized/step_timer.h): per decoded token, the time in
// projections, attention, KV writes, the policy, the page manager, the rest of the decode pass,
// and the scheduler. And a roofline per engine run (bench/step_roofline.h) at its mean decode batch
// and mean stored KV, over the copy bandwidth and GEMM rate measured in this run.
//
// JSON: format "kvcheck-bench-engine", version 3; model, policy, threads, linear_isa,
// prompt_tokens, new_tokens, batch, seed, repeat, machine {copy_bytes_per_s, gemm_flops_per_s};
// runs: [{name, requests, tokens, seconds (mean), tokens_per_s {mean, sd, values}, and for the
// engine: pp_tokens_per_s and tg_tokens_per_s {mean, sd, values}, prompt_tokens, decode_tokens,
// per_token_us {projections, attention, kv_write, policy, page_manager, other_decode, scheduler,
// total} (means over rounds, per decoded token), roofline {batch, weight_bytes, kv_bytes, flops,
// bandwidth_s, compute_s, predicted_step_s, predicted_tokens_per_s, achieved_fraction (tg mean over
// predicted), bound}}]; ratios: {batch1, batchB} against the KV-cache reference;
// ratios_vs_recompute: the same against the full-recompute reference.
#include <chrono>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/serving_run.h"
#include "bench/step_roofline.h"
#include "cli/commands.h"
#include "cli/json_file.h"
#include "kernels/cpu/dense_ops.h"
#include "optimized/engine.h"
#include "optimized/scheduler.h"
#include "optimized/step_timer.h"
#include "reference/errors.h"
#include "reference/generate.h"
#include "reference/model.h"

namespace kvcheck::cli {

namespace {

using Clock = std::chrono::steady_clock;

// Per decoded token, the parts of the engine's step time (seconds).
struct TokenBreakdown {
  double projections = 0.0, attention = 0.0, kv_write = 0.0, policy = 0.0, page_manager = 0.0, other_decode = 0.0,
         scheduler = 0.0;
  double total() const { return projections + attention + kv_write + policy + page_manager + other_decode + scheduler; }
};

// One round of one configuration.
struct Sample {
  std::int64_t tokens = 0;
  double seconds = 0.0;
  // The engine's: prompt tokens and prefill seconds, decode tokens and the steps' other seconds.
  std::int64_t prompt_tokens = 0, decode_tokens = 0, decode_steps = 0;
  double prefill_s = 0.0, generation_s = 0.0;
  TokenBreakdown per_token;
  double mean_kv_slots = 0.0, mean_kv_bytes = 0.0;  // over decode steps
};

// Tokens over seconds (0 when nothing was timed: --new-tokens 1 has no decode step).
double per_second(std::int64_t tokens, double seconds) {
  return seconds > 0.0 ? static_cast<double>(tokens) / seconds : 0.0;
}
double tokens_per_s(const Sample& s) { return per_second(s.tokens, s.seconds); }
double pp_tokens_per_s(const Sample& s) { return per_second(s.prompt_tokens, s.prefill_s); }
double tg_tokens_per_s(const Sample& s) { return per_second(s.decode_tokens, s.generation_s); }

struct Run {
  std::string name;
  std::int64_t requests = 0;
  bool engine = false;
  std::vector<Sample> samples;

  std::vector<double> values(double (*f)(const Sample&)) const {
    std::vector<double> v;
    for (const Sample& s : samples) v.push_back(f(s));
    return v;
  }
  MeanSd rate() const { return mean_sd(values(tokens_per_s)); }
  MeanSd pp() const { return mean_sd(values(pp_tokens_per_s)); }
  MeanSd tg() const { return mean_sd(values(tg_tokens_per_s)); }
  double mean(double (*f)(const Sample&)) const { return mean_sd(values(f)).mean; }
};

// `requests` prompts through a fresh scheduler at most `max_batch` at a time, every step timed
// and its parts with it; the stored KV is sampled after each decode step, outside the timing.
Sample engine_round(Engine& engine, const std::vector<std::vector<std::int32_t>>& prompts, std::int64_t requests,
                    std::int64_t max_batch, std::int64_t new_tokens) {
  SchedulerConfig sc;
  sc.max_batch = max_batch;
  Scheduler s(*engine.runner, sc);
  for (std::int64_t i = 0; i < requests; ++i) s.submit({1000 + i, prompts[static_cast<std::size_t>(i)], new_tokens, false, 0});
  Sample out;
  double kv_slots = 0.0, kv_bytes = 0.0;
  reset_step_times();
  set_step_timing(true);
  for (bool more = true; more;) {
    const std::int64_t decode_steps = s.stats().decode_steps;
    const auto t0 = Clock::now();
    more = s.step();
    out.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    if (s.stats().decode_steps > decode_steps && s.running() > 0) {
      const StoredKv kv = stored_kv(*engine.cache);
      kv_slots += kv.slots;
      kv_bytes += kv.bytes;
      ++out.decode_steps;
    }
  }
  set_step_timing(false);
  for (const GenerationResult& g : s.run()) {
    if (g.stop_reason == StopReason::kError) throw std::runtime_error(g.error);
    out.tokens += static_cast<std::int64_t>(g.tokens.size());
  }
  const StepTimes t = step_times();
  const SchedulerStats& st = s.stats();
  out.prompt_tokens = st.prefill_tokens;
  out.decode_tokens = st.decode_tokens;
  out.prefill_s = t[StepPart::kPrefill];
  out.generation_s = t[StepPart::kStep] - t[StepPart::kPrefill];
  if (out.decode_steps > 0) {
    out.mean_kv_slots = kv_slots / static_cast<double>(out.decode_steps);
    out.mean_kv_bytes = kv_bytes / static_cast<double>(out.decode_steps);
  }
  out.decode_steps = st.decode_steps;
  const double n = static_cast<double>(std::max<std::int64_t>(out.decode_tokens, 1));
  TokenBreakdown& b = out.per_token;
  b.projections = t[StepPart::kProjections] / n;
  b.attention = t[StepPart::kAttention] / n;
  b.kv_write = t[StepPart::kKvWrite] / n;
  b.policy = t[StepPart::kPolicy] / n;
  b.page_manager = t[StepPart::kPageManager] / n;
  b.other_decode = t[StepPart::kDecode] / n - (b.projections + b.attention + b.kv_write + b.policy + b.page_manager);
  b.scheduler = (t[StepPart::kStep] - t[StepPart::kPrefill] - t[StepPart::kDecode]) / n;
  return out;
}

std::string pm(const MeanSd& m) { return fmt::format("{:.1f} ± {:.1f}", m.mean, m.sd); }

nlohmann::json mean_sd_json(const MeanSd& m, const std::vector<double>& values) {
  return {{"mean", m.mean}, {"sd", m.sd}, {"values", values}};
}

}  // namespace

int run_engine_bench(const BenchArgs& args) {
  std::filesystem::path dir;
  const auto load_start = Clock::now();
  const ReferenceModel model = bench_model(args, dir);
  const double load_seconds = std::chrono::duration<double>(Clock::now() - load_start).count();
  const std::string model_name = dir.empty() ? fmt::format("dummy weights of {}", args.shape) : dir.string();
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
  // Batch-1 runs use a few requests: enough for a stable rate, few enough for the slow reference.
  const std::int64_t solo = std::min<std::int64_t>(args.batch, 4);
  std::vector<Run> runs;
  if (!args.no_reference) {
    runs.push_back({"reference batch 1", solo, false, {}});
    runs.push_back({"reference recompute", 1, false, {}});  // each of its steps costs a whole prefill
  }
  runs.push_back({"engine batch 1", solo, true, {}});
  runs.push_back({fmt::format("engine batch {}", args.batch), args.batch, true, {}});
  const std::size_t engine1 = runs.size() - 2, engineB = runs.size() - 1;
  auto reference_round = [&](std::int64_t requests, DecodePath path) {
    Sample s;
    const auto t0 = Clock::now();
    for (std::int64_t i = 0; i < requests; ++i) {
      GenerateOptions go;
      go.max_new_tokens = args.new_tokens;
      go.stop_at_eos = false;
      go.path = path;
      s.tokens += static_cast<std::int64_t>(generate_greedy(model, prompts[static_cast<std::size_t>(i)], go).generated.size());
    }
    s.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    return s;
  };
  EngineOptions eo;
  eo.policy = args.policy;
  eo.threads = args.threads;
  eo.batch_hint = args.batch;
  std::unique_ptr<Engine> engine = make_engine(model, eo);
  const MachineRates machine = measure_machine_rates(engine->backend->threads());
  const std::int64_t weight_bytes = decode_weight_bytes(engine->weights);
  for (std::int64_t round = 0; round < args.repeat; ++round) {
    if (!args.no_reference) {
      runs[0].samples.push_back(reference_round(solo, DecodePath::kKVCache));
      runs[1].samples.push_back(reference_round(1, DecodePath::kFullRecompute));
    }
    runs[engine1].samples.push_back(engine_round(*engine, prompts, solo, 1, args.new_tokens));
    runs[engineB].samples.push_back(engine_round(*engine, prompts, args.batch, args.batch, args.new_tokens));
  }

  fmt::print("kvcheck bench --engine: {} ({} layers, hidden {}), policy {}, {} threads, {} linear kernel; prompts "
             "of {} tokens (seed {}), {} new tokens each; {} round{}; model loaded in {:.2f} s\n\n",
             model_name, c.num_hidden_layers, c.hidden_size, args.policy, engine->backend->threads(),
             linear_isa_name(linear_rows_isa()), args.prompt_tokens, args.seed, args.new_tokens, args.repeat,
             args.repeat == 1 ? "" : "s", load_seconds);
  fmt::print("{:<20} {:>9} {:>9} {:>10} {:>20} {:>22} {:>20}\n", "run", "requests", "tokens", "seconds",
             "tokens/s", "pp tokens/s", "tg tokens/s");
  for (const Run& r : runs) {
    fmt::print("{:<20} {:>9} {:>9} {:>10.3f} {:>20} {:>22} {:>20}\n", r.name, r.requests, r.samples.front().tokens,
               r.mean([](const Sample& s) { return s.seconds; }), pm(r.rate()), r.engine ? pm(r.pp()) : "-",
               r.engine ? pm(r.tg()) : "-");
  }
  fmt::print("\ntokens/s: generated tokens over wall time, prefill included (mean ± sd over rounds); pp: prompt "
             "tokens over prefill time; tg: tokens from decode steps over the steps' time outside prefill.\n");
  nlohmann::json ratios = nullptr, ratios_vs_recompute = nullptr;
  if (args.no_reference) {
    fmt::print("engine / reference: not measured (--no-reference)\n");
  } else {
    const double reference = runs[0].rate().mean, recompute = runs[1].rate().mean;
    const double ratio1 = runs[engine1].rate().mean / reference, ratioB = runs[engineB].rate().mean / reference;
    const double recompute1 = runs[engine1].rate().mean / recompute, recomputeB = runs[engineB].rate().mean / recompute;
    fmt::print("engine / reference (KV cache) tokens/s:  batch 1 {:.1f}x, batch {} {:.1f}x (aggregate)\n", ratio1,
               args.batch, ratioB);
    fmt::print("engine / reference (recompute) tokens/s: batch 1 {:.1f}x, batch {} {:.1f}x (aggregate)\n", recompute1,
               args.batch, recomputeB);
    ratios = {{"batch1", ratio1}, {"batchB", ratioB}};
    ratios_vs_recompute = {{"batch1", recompute1}, {"batchB", recomputeB}};
  }

  // Means over rounds of each part, per decoded token.
  auto breakdown = [](const Run& r) {
    TokenBreakdown b;
    for (const Sample& s : r.samples) {
      b.projections += s.per_token.projections;
      b.attention += s.per_token.attention;
      b.kv_write += s.per_token.kv_write;
      b.policy += s.per_token.policy;
      b.page_manager += s.per_token.page_manager;
      b.other_decode += s.per_token.other_decode;
      b.scheduler += s.per_token.scheduler;
    }
    const auto n = static_cast<double>(r.samples.size());
    for (double* p : {&b.projections, &b.attention, &b.kv_write, &b.policy, &b.page_manager, &b.other_decode,
                      &b.scheduler}) {
      *p /= n;
    }
    return b;
  };
  fmt::print("\nper decoded token, us (step timers; other: norms, RoPE, SwiGLU, embedding; scheduler: step outside "
             "prefill and decode):\n");
  fmt::print("{:<20} {:>11} {:>9} {:>8} {:>7} {:>12} {:>7} {:>9} {:>8}\n", "run", "projections", "attention",
             "kv write", "policy", "page manager", "other", "scheduler", "total");
  for (const Run& r : runs) {
    if (!r.engine) continue;
    const TokenBreakdown b = breakdown(r);
    fmt::print("{:<20} {:>11.2f} {:>9.2f} {:>8.2f} {:>7.2f} {:>12.2f} {:>7.2f} {:>9.2f} {:>8.2f}\n", r.name,
               b.projections * 1e6, b.attention * 1e6, b.kv_write * 1e6, b.policy * 1e6, b.page_manager * 1e6,
               b.other_decode * 1e6, b.scheduler * 1e6, b.total() * 1e6);
  }

  // The roofline of each engine run's mean decode step.
  struct RunRoof {
    double batch = 0.0;
    DecodeStepWork work;
    Roofline roof;
    double predicted_tokens_per_s = 0.0, achieved = 0.0;
  };
  auto run_roof = [&](const Run& r) {
    RunRoof rr;
    const double steps = r.mean([](const Sample& s) { return static_cast<double>(s.decode_steps); });
    rr.batch = steps > 0.0 ? r.mean([](const Sample& s) { return static_cast<double>(s.decode_tokens); }) / steps : 0.0;
    rr.work = decode_step_work(c, weight_bytes, rr.batch, r.mean([](const Sample& s) { return s.mean_kv_slots; }),
                               r.mean([](const Sample& s) { return s.mean_kv_bytes; }));
    rr.roof = roofline(rr.work, machine.copy_bytes_per_s, machine.gemm_flops_per_s);
    rr.predicted_tokens_per_s = rr.batch / rr.roof.predicted_s();
    rr.achieved = r.tg().mean / rr.predicted_tokens_per_s;
    return rr;
  };
  fmt::print("\nroofline per decode step: copy bandwidth {:.2f} GB/s, compute {:.1f} GFLOP/s (the faster of Eigen's GEMM and linear_rows, {} copies at once; the copy on as many threads), "
             "measured in this run\n",
             machine.copy_bytes_per_s * 1e-9, machine.gemm_flops_per_s * 1e-9, machine.threads);
  fmt::print("{:<20} {:>6} {:>10} {:>9} {:>9} {:>8} {:>8} {:>9} {:>11} {:>10} {:>7}  {}\n", "run", "batch",
             "weight MiB", "KV MiB", "MFLOP", "bytes ms", "FLOP ms", "step ms", "roof tok/s", "tg tok/s", "x roof",
             "bound");
  std::vector<RunRoof> roofs;
  for (const Run& r : runs) {
    if (!r.engine) continue;
    const RunRoof rr = run_roof(r);
    roofs.push_back(rr);
    fmt::print("{:<20} {:>6.1f} {:>10.2f} {:>9.3f} {:>9.2f} {:>8.3f} {:>8.3f} {:>9.3f} {:>11.1f} {:>10.1f} {:>7.2f}  {}\n",
               r.name, rr.batch, rr.work.weight_bytes / (1024.0 * 1024.0), rr.work.kv_bytes / (1024.0 * 1024.0),
               rr.work.flops * 1e-6, rr.roof.bandwidth_s * 1e3, rr.roof.compute_s * 1e3, rr.roof.predicted_s() * 1e3,
               rr.predicted_tokens_per_s, r.tg().mean, rr.achieved, rr.roof.bound());
  }
  fmt::print("bytes: weights read once per step + the mean stored KV; step ms: the larger of bytes / bandwidth and "
             "FLOPs / compute rate; x roof: tg tokens/s over roof tokens/s.\n");

  if (!args.json.empty()) {
    nlohmann::json rows = nlohmann::json::array();
    std::size_t engine_row = 0;
    for (const Run& r : runs) {
      nlohmann::json row = {{"name", r.name},
                            {"requests", r.requests},
                            {"tokens", r.samples.front().tokens},
                            {"seconds", r.mean([](const Sample& s) { return s.seconds; })},
                            {"tokens_per_s", mean_sd_json(r.rate(), r.values(tokens_per_s))}};
      if (r.engine) {
        const TokenBreakdown b = breakdown(r);
        const RunRoof& rr = roofs[engine_row++];
        row["prompt_tokens"] = r.samples.front().prompt_tokens;
        row["decode_tokens"] = r.samples.front().decode_tokens;
        row["pp_tokens_per_s"] = mean_sd_json(r.pp(), r.values(pp_tokens_per_s));
        row["tg_tokens_per_s"] = mean_sd_json(r.tg(), r.values(tg_tokens_per_s));
        row["per_token_us"] = {{"projections", b.projections * 1e6}, {"attention", b.attention * 1e6},
                               {"kv_write", b.kv_write * 1e6},       {"policy", b.policy * 1e6},
                               {"page_manager", b.page_manager * 1e6}, {"other_decode", b.other_decode * 1e6},
                               {"scheduler", b.scheduler * 1e6},     {"total", b.total() * 1e6}};
        row["roofline"] = {{"batch", rr.batch},
                           {"weight_bytes", rr.work.weight_bytes},
                           {"kv_bytes", rr.work.kv_bytes},
                           {"flops", rr.work.flops},
                           {"bandwidth_s", rr.roof.bandwidth_s},
                           {"compute_s", rr.roof.compute_s},
                           {"predicted_step_s", rr.roof.predicted_s()},
                           {"predicted_tokens_per_s", rr.predicted_tokens_per_s},
                           {"achieved_fraction", rr.achieved},
                           {"bound", rr.roof.bound()}};
      }
      rows.push_back(row);
    }
    write_json_atomically(args.json,
                          {{"format", "kvcheck-bench-engine"},
                           {"version", 3},
                           {"model", model_name},
                           {"policy", args.policy},
                           {"threads", engine->backend->threads()},
                           {"linear_isa", linear_isa_name(linear_rows_isa())},
                           {"prompt_tokens", args.prompt_tokens},
                           {"new_tokens", args.new_tokens},
                           {"batch", args.batch},
                           {"seed", args.seed},
                           {"repeat", args.repeat},
                           {"machine", {{"copy_bytes_per_s", machine.copy_bytes_per_s},
                                        {"gemm_flops_per_s", machine.gemm_flops_per_s}}},
                           {"load_seconds", load_seconds},
                           {"runs", rows},
                           {"ratios", ratios},
                           {"ratios_vs_recompute", ratios_vs_recompute}},
                          "--json");
  }
  return 0;
}

}  // namespace kvcheck::cli
