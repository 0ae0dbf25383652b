// kvcheck bench: benchmark modes, one flag each. --fragmentation: SpvLLM's internal-fragmentation
// micro-benchmark on the block allocator (optimized/fragmentation_workload.h describes the
// workload, the victim rule and what is measured): the no-eviction baseline, then the four slot
// strategies (no-op, free-block, sparse-copy, slot-reuse) at token budgets 256, 512 and 1024.
//
// JSON (--json FILE, written atomically): format "kvcheck-bench-fragmentation", version 1; seed,
// requests, block_size, max_batch, recent_share, victim_rule, mean_prompt/mean_output (the
// lognormal means asked for), measured_mean_prompt/measured_mean_output, budgets; results: [{
// strategy, budget (0: no eviction), steps, fragmentation {p50, p99, mean}, evictions, copies,
// copied_slots, copied_bytes, preallocated_blocks, peak_blocks, pool_blocks}].
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/json_file.h"
#include "cli/output_file.h"
#include "cli/progress.h"
#include "optimized/fragmentation_workload.h"
#include "reference/dummy_model.h"
#include "reference/errors.h"

namespace kvcheck::cli {

namespace {

constexpr const char* kVictimRule =
    "uniform over live tokens except the most recent ceil(recent_share x budget), per-request seeded generator";

int run_fragmentation(const BenchArgs& args) {
  FragmentationWorkloadConfig c;
  c.seed = args.seed;
  c.requests = args.requests > 0 ? args.requests : 1000;
  const std::vector<WorkloadRequest> requests = make_fragmentation_requests(c);
  double prompt_sum = 0.0, output_sum = 0.0;
  for (const WorkloadRequest& r : requests) {
    prompt_sum += static_cast<double>(r.prompt);
    output_sum += static_cast<double>(r.output);
  }
  const double n = static_cast<double>(requests.size());

  ProgressBar bar("fragmentation", "runs", args.quiet);
  const std::vector<FragmentationResult> results = run_fragmentation_bench(c, [&](std::int64_t d, std::int64_t t) {
    bar.update(d, t);
  });

  fmt::print("kvcheck bench --fragmentation: {} requests (seed {}), prompt mean {:.1f}, output mean {:.1f} tokens; "
             "block size {}, batch {}\n",
             c.requests, c.seed, prompt_sum / n, output_sum / n, c.block_size, c.max_batch);
  fmt::print("victims: {} (recent_share {})\n\n", kVictimRule, c.recent_share);
  fmt::print("{:>7}  {:<12} {:>8} {:>8} {:>8} {:>10} {:>14} {:>12} {:>10} {:>6}\n", "budget", "strategy", "frag p50",
             "frag p99", "mean", "copies", "copied slots", "copied MiB", "prealloc", "peak");
  for (const FragmentationResult& r : results) {
    fmt::print("{:>7}  {:<12} {:>8.4f} {:>8.4f} {:>8.4f} {:>10} {:>14} {:>12.2f} {:>10} {:>6}\n",
               r.budget == 0 ? std::string("-") : std::to_string(r.budget), r.strategy, r.p50, r.p99, r.mean,
               r.copy.copies, r.copy.copied_slots, static_cast<double>(r.copy.copied_bytes) / (1024.0 * 1024.0),
               r.copy.preallocated_blocks, r.peak_blocks);
  }
  fmt::print("\nfragmentation = 1 - live slots / allocated slots over the running sequences, sampled per step;\n"
             "copied bytes count the allocator's {}-byte slot payload; peak = most blocks in use at once.\n",
             sizeof(SlotPayload));

  if (!args.json.empty()) {
    nlohmann::json j;
    j["format"] = "kvcheck-bench-fragmentation";
    j["version"] = 1;
    j["seed"] = c.seed;
    j["requests"] = c.requests;
    j["block_size"] = c.block_size;
    j["max_batch"] = c.max_batch;
    j["recent_share"] = c.recent_share;
    j["victim_rule"] = kVictimRule;
    j["mean_prompt"] = c.mean_prompt;
    j["mean_output"] = c.mean_output;
    j["measured_mean_prompt"] = prompt_sum / n;
    j["measured_mean_output"] = output_sum / n;
    j["budgets"] = c.budgets;
    nlohmann::json rows = nlohmann::json::array();
    for (const FragmentationResult& r : results) {
      rows.push_back({{"strategy", r.strategy},
                      {"budget", r.budget},
                      {"steps", r.steps},
                      {"fragmentation", {{"p50", r.p50}, {"p99", r.p99}, {"mean", r.mean}}},
                      {"evictions", r.evictions},
                      {"copies", r.copy.copies},
                      {"copied_slots", r.copy.copied_slots},
                      {"copied_bytes", r.copy.copied_bytes},
                      {"preallocated_blocks", r.copy.preallocated_blocks},
                      {"peak_blocks", r.peak_blocks},
                      {"pool_blocks", r.pool_blocks}});
    }
    j["results"] = rows;
    write_json_atomically(args.json, j, "--json");
    fmt::print("\njson: {}\n", args.json);
  }
  return 0;
}

}  // namespace

void add_bench(CLI::App& app, BenchArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "bench", "Benchmarks (one mode at a time: --workload NAME / --workload-file FILE, --fragmentation, --engine, "
               "--reference-prefill)");
  cmd->add_option("--workload", args.workload,
                  "Serving benchmark on a synthetic workload: chat, reasoning, long-context or shared-prefix");
  cmd->add_option("--workload-file", args.workload_file, "Serving benchmark on the requests of a JSONL file");
  cmd->add_option("--save-workload", args.save_workload, "--workload: also write the requests as JSONL to FILE");
  cmd->add_option("--policies", args.policies,
                  "--workload: policies after the contiguous and paged-fp16 baselines (comma-separated specs)")
      ->capture_default_str();
  cmd->add_option("--kv-budget", args.kv_budget,
                  "--workload: KV memory in bytes (0: --kv-budget-requests of the workload's longest request "
                  "in full fp16)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--kv-budget-requests", args.kv_budget_requests,
                  "--workload without --kv-budget: the budget holds this many of the workload's longest "
                  "requests (prompt + output) in full fp16")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--prefix-cache", args.prefix_cache,
                 "--workload: run each paged row of a prefix-closed policy with the prefix cache, followed by "
                 "its --no-prefix-cache baseline (same prefill, nothing reused); always on for shared-prefix");
  cmd->add_option("--page-bytes", args.page_bytes, "--workload: page size (0: 16 tokens of a full-fp16 head)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--rate", args.rate, "--workload: Poisson arrivals, requests per second (0: all at once)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--reasoning-cap", args.reasoning_cap, "--workload reasoning: longest generation")
      ->capture_default_str();
  cmd->add_option("--max-batch", args.max_batch, "--workload: most requests decoded together")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--preemption", args.preemption, "--workload: recompute, swap or auto")->capture_default_str();
  cmd->add_option("--device", args.device, "--workload: cpu, cuda or cuda-resident")->capture_default_str();
  cmd->add_flag("--dummy-weights", args.dummy_weights,
                "--workload, --engine, --reference-prefill: seeded random weights of --shape instead of a checkpoint "
                "(vLLM's dummy format)");
  cmd->add_option("--shape", args.shape, fmt::format("--dummy-weights: {}", fmt::join(dummy_shape_names(), ", ")));
  cmd->add_option("--dummy-layers", args.dummy_layers, "--dummy-weights: keep only N layers (0: all)")
      ->capture_default_str();
  cmd->add_flag("--fragmentation", args.fragmentation,
                "Internal fragmentation of the four SpvLLM slot strategies and the no-eviction baseline "
                "on a synthetic ShareGPT-like workload");
  cmd->add_flag("--engine", args.engine,
                "Generation speed of the optimized engine at batch 1 and at --batch against the reference at "
                "batch 1, measured side by side in this run");
  cmd->add_flag("--no-reference", args.no_reference,
                "--engine: skip the reference rows (for real models, whose double-precision reference would take "
                "hours at long prompts); the engine rows and their roofline only");
  cmd->add_flag("--reference-prefill", args.reference_prefill,
                "The reference's prefill of --tokens random ids (logits of the last row) against its roofline "
                "(double compute rate, the faster of Eigen's GEMM and the reference's dot_rows, and copy bandwidth on the same threads), measured side by side in this run");
  cmd->add_option("--tokens", args.tokens, "--reference-prefill: prompt tokens")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--model", args.model,
                  "--engine, --workload, --reference-prefill: model directory or GGUF file (default: the embedded model)");
  cmd->add_option("--policy", args.policy, "--engine: KV policy")->capture_default_str();
  cmd->add_option("--prompt-tokens", args.prompt_tokens, "--engine: tokens per prompt")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--new-tokens", args.new_tokens, "--engine: tokens generated per request")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--batch", args.batch, "--engine: requests decoded together")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--repeat", args.repeat, "--engine: runs of each configuration (mean +- standard deviation)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--threads", args.threads, "--engine, --workload, --reference-prefill: CPU threads (0: every core)")
      ->capture_default_str();
  cmd->add_option("--json", args.json, "Write the results as JSON to FILE (atomically)");
  cmd->add_option("--seed", args.seed, "Workload seed")->capture_default_str();
  cmd->add_option("--requests", args.requests, "Number of requests (0: 1000 for --fragmentation, 64 for --workload)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_flag("--quiet", args.quiet, "No progress on stderr");
}

int run_bench(const BenchArgs& args) {
  const bool serving = !args.workload.empty() || !args.workload_file.empty();
  if (static_cast<int>(args.fragmentation) + static_cast<int>(args.engine) + static_cast<int>(serving) +
          static_cast<int>(args.reference_prefill) >
      1) {
    throw input_error("kvcheck bench", "mode",
                      "pass one mode at a time (--workload/--workload-file, --fragmentation, --engine or "
                      "--reference-prefill)");
  }
  if (!args.json.empty()) check_output_file(args.json, "--json");  // before the benchmark, not after it
  if (args.fragmentation) return run_fragmentation(args);
  if (args.engine) return run_engine_bench(args);
  if (serving) return run_serving_bench(args);
  if (args.reference_prefill) return run_reference_prefill_bench(args);
  throw input_error("kvcheck bench", "mode",
                    "no benchmark mode given: pass one of --workload NAME, --workload-file FILE, --fragmentation, "
                    "--engine, --reference-prefill");
}

}  // namespace kvcheck::cli
