// kvcheck bench --workload NAME | --workload-file FILE: the end-to-end serving benchmark
// (bench/serving_run.h says what is timed and measured). One workload, one KV budget, and in the
// same run: the contiguous max-length baseline, paged full fp16, then each policy of --policies.
// Ratios are against paged full fp16. Each configuration gets a roofline (bench/step_roofline.h)
// at the mean batch it achieved, over the same run's copy bandwidth and GEMM rate. A configuration
// in which any request was refused or failed gets no throughput, ratio or roofline fraction: its
// rates would cover only the requests that ran; the table says how many were refused and failed.
//
// Prefix reuse: on the shared-prefix workload (or with --prefix-cache), each paged row of a
// prefix-closed policy runs with the scheduler's prefix cache and then as "<row> --no-prefix-cache":
// the same reusable prefill (ModelRunner::set_reusable_prefill), nothing reused. A second table
// gives prompt tokens computed and saved, pages shared at the peak, copy-on-write copies, evictions.
//
// JSON (--json FILE, written atomically): format "kvcheck-bench-serving", version 3; model,
// device, threads, workload {name, file, requests, seed, rate, reasoning_cap, mean_prompt_tokens,
// mean_output_tokens, longest_request_tokens}, kv_budget_bytes, kv_budget_requests (0: given in
// bytes), page_bytes, pool_pages, max_batch, preemption, machine {copy_bytes_per_s,
// gemm_flops_per_s, threads}; results: [{policy (the row's name), policy_spec, contiguous,
// prefix_cache, prefill_tokens, prefix_hit_tokens, peak_shared_pages, cow_copies, prefix_evictions,
// requests_submitted, requests_completed, requests_failed, requests_refused, all_completed, errors,
// tokens_requested, output_tokens, output_tokens_per_s and requests_per_s (null unless
// all_completed), partial_output_tokens_per_s (generated over the makespan, whatever completed),
// decode_tokens, generation_s, generation_tokens_per_s (tg: decode tokens over the steps' time
// outside prefill; null unless all_completed),
// mean_batch_size, max_batch_seen, peak_kv_bytes, fragmentation_p50, fragmentation_p99,
// fragmentation_mean, preemptions (total), preemptions_by_kind {recompute, swap}, recomputed_tokens, replayed_rows,
// swapped_bytes, ttft_s / tpot_s / itl_s {p50, p99, mean, count}, makespan_s, skipped_idle_s,
// wall_s, steps, decode_steps, roofline {weight_bytes, kv_bytes, flops, bandwidth_s, compute_s,
// predicted_step_s, predicted_tokens_per_s, achieved_fraction and generation_fraction (tok/s and tg
// over predicted_tokens_per_s; null unless all_completed), bound},
// ratios_vs_paged_fp16 {output_tokens_per_s, requests_per_s, mean_batch_size, peak_kv_bytes}
// (the first two null unless both rows completed everything), transfers (null unless the device
// is resident: {to_device, to_host} each {kind: bytes over the run} for the ledger's kinds, and
// per_decode_step {to_device, to_host}: the bytes of every kind but weights and trace over
// decode_steps)}].
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <random>
#include <thread>

#include "bench/serving_run.h"
#include "bench/serving_workload.h"
#include "bench/step_roofline.h"
#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/json_file.h"
#include "cli/progress.h"
#include "kernels/cpu/kv_bytes.h"
#include "oracles/eval_data.h"
#include "optimized/kv_policy.h"
#include "reference/errors.h"
#include "reference/dummy_model.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

namespace {

// The bytes a run moved one way but the weights' one upload (and the trace, which step_bytes
// leaves out).
std::int64_t traffic_bytes(const TransferCounts& t, Direction d) { return t.step_bytes(d) - t.of(d, Transfer::kWeights); }

// A resident backend's ledger over the run (null for a backend without one): bytes by direction
// and kind, and the mean bytes a decode step moved each way (weights and trace left out).
nlohmann::json transfers_json(const ServingResult& r) {
  if (!r.transfers) return nullptr;
  const TransferCounts& t = *r.transfers;
  nlohmann::json j = {{"to_device", nlohmann::json::object()}, {"to_host", nlohmann::json::object()}};
  for (int k = 0; k < kTransferKinds; ++k) {
    const auto kind = static_cast<Transfer>(k);
    j["to_device"][transfer_name(kind)] = t.of(Direction::kToDevice, kind);
    j["to_host"][transfer_name(kind)] = t.of(Direction::kToHost, kind);
  }
  const auto per_step = [&](Direction d) {
    return r.decode_steps > 0 ? static_cast<double>(traffic_bytes(t, d)) / static_cast<double>(r.decode_steps) : 0.0;
  };
  j["per_decode_step"] = {{"to_device", per_step(Direction::kToDevice)}, {"to_host", per_step(Direction::kToHost)}};
  return j;
}

// Token ids of real text to cut prompts from: the held-out documents through the model's tokenizer,
// or seeded random ids for a model without one.
std::vector<std::int32_t> prompt_text(const std::filesystem::path& dir, const ModelConfig& c, std::uint64_t seed,
                                      std::string& origin) {
  std::vector<std::int32_t> text;
  const std::filesystem::path heldout = datasets_dir() / "eval" / "heldout.jsonl";
  const std::optional<std::filesystem::path> tok = Tokenizer::find_file(dir);
  if (tok && std::filesystem::exists(heldout)) {
    const Tokenizer tokenizer = Tokenizer::load(*tok);
    for (const HeldoutDocument& d : load_heldout(heldout)) {
      const std::vector<std::int32_t> ids = tokenizer.encode(d.text, false);
      text.insert(text.end(), ids.begin(), ids.end());
      if (text.size() > 65536) break;
    }
    origin = fmt::format("held-out text ({})", heldout.string());
    return text;
  }
  std::mt19937_64 rng(seed);
  const auto ids = static_cast<std::uint64_t>(std::max<std::int64_t>(c.vocab_size - 3, 1));
  for (int i = 0; i < 65536; ++i) text.push_back(static_cast<std::int32_t>(3 + rng() % ids));
  origin = dir.empty() ? "seeded random ids (dummy weights)" : "seeded random ids (the model has no tokenizer)";
  return text;
}

// A rate cell: "-" for a configuration whose rates cover only part of its requests.
std::string rate_cell(bool comparable, double value, int decimals) {
  return comparable ? fmt::format("{:.{}f}", value, decimals) : std::string("-");
}

nlohmann::json comparable_json(bool comparable, double value) {
  return comparable ? nlohmann::json(value) : nlohmann::json(nullptr);
}

std::string ms(const Percentiles& p) { return fmt::format("{:.1f}/{:.1f}", p.p50 * 1e3, p.p99 * 1e3); }

nlohmann::json percentiles_json(const Percentiles& p) {
  return {{"p50", p.p50}, {"p99", p.p99}, {"mean", p.mean}, {"count", p.count}};
}

double ratio(double a, double b) { return b > 0.0 ? a / b : 0.0; }

// `n` requests of `tokens` tokens each in full fp16, in whole pages of every layer and kv head.
std::int64_t fp16_budget_bytes(const ModelConfig& c, std::int64_t page_bytes, std::int64_t tokens, std::int64_t n) {
  const KvTier tier = make_policy("full-fp16")->tiers().front();
  const std::int64_t tpp = tokens_per_page(tier, c.head_dim, page_bytes);
  const std::int64_t per_request = (tokens + tpp - 1) / tpp * c.num_hidden_layers * c.num_key_value_heads;
  return n * per_request * page_bytes;
}

// The CPU backend's thread count for --threads (0: every core).
int resolved_threads(int threads) {
  return threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

nlohmann::json roofline_json(const DecodeStepWork& w, const Roofline& r, double predicted_tokens_per_s,
                             nlohmann::json achieved_fraction, nlohmann::json generation_fraction) {
  return {{"weight_bytes", w.weight_bytes},
          {"kv_bytes", w.kv_bytes},
          {"flops", w.flops},
          {"bandwidth_s", r.bandwidth_s},
          {"compute_s", r.compute_s},
          {"predicted_step_s", r.predicted_s()},
          {"predicted_tokens_per_s", predicted_tokens_per_s},
          {"achieved_fraction", std::move(achieved_fraction)},
          {"generation_fraction", std::move(generation_fraction)},
          {"bound", r.bound()}};
}

}  // namespace

ReferenceModel bench_model(const BenchArgs& args, std::filesystem::path& dir) {
  if (args.dummy_weights) {
    if (!args.model.empty()) throw input_error("kvcheck bench", "--dummy-weights", "give --model or --dummy-weights, not both");
    if (args.shape.empty()) {
      throw input_error("kvcheck bench", "--dummy-weights", "needs --shape ({})", fmt::join(dummy_shape_names(), ", "));
    }
    dir.clear();
    return make_dummy_model(dummy_shape_config(args.shape, args.dummy_layers), args.shape, args.seed);
  }
  if (!args.shape.empty()) throw input_error("kvcheck bench", "--shape", "needs --dummy-weights");
  dir = args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  return ReferenceModel::load(dir);
}

int run_serving_bench(const BenchArgs& args) {
  if (!args.workload.empty() && !args.workload_file.empty()) {
    throw input_error("kvcheck bench", "--workload", "give --workload NAME or --workload-file FILE, not both");
  }
  std::filesystem::path dir;
  const ReferenceModel model = bench_model(args, dir);
  const std::string model_name = dir.empty() ? model.origin() : dir.string();
  const ModelConfig& c = model.config();
  const PreemptionMode preemption = parse_preemption_mode(args.preemption);

  ServingWorkloadConfig wc;
  wc.name = args.workload_file.empty() ? args.workload : "file";
  wc.requests = args.requests > 0 ? args.requests : 64;
  wc.seed = args.seed;
  wc.max_context = c.max_position_embeddings;
  wc.reasoning_cap = args.reasoning_cap;
  wc.rate = args.rate;
  std::vector<ServingRequest> requests;
  if (args.workload_file.empty()) {
    requests = make_serving_workload(wc);
  } else {
    requests = load_serving_workload(args.workload_file, c.max_position_embeddings, c.vocab_size);
    if (args.rate > 0.0) assign_arrivals(requests, args.rate, args.seed);
    wc.requests = static_cast<std::int64_t>(requests.size());
  }
  if (!args.save_workload.empty()) save_serving_workload(args.save_workload, requests);
  std::string origin;
  const std::int32_t bos =
      c.bos_token_id && *c.bos_token_id < c.vocab_size ? static_cast<std::int32_t>(*c.bos_token_id) : -1;
  fill_prompts(requests, prompt_text(dir, c, args.seed, origin), bos, args.seed);
  double prompt_sum = 0.0, output_sum = 0.0;
  for (const ServingRequest& r : requests) {
    prompt_sum += static_cast<double>(r.prompt_tokens);
    output_sum += static_cast<double>(r.output_tokens);
  }
  const double n = static_cast<double>(requests.size());

  const std::int64_t page_bytes = args.page_bytes > 0 ? args.page_bytes : sixteen_token_page_bytes(c);
  std::int64_t longest = 0;
  for (const ServingRequest& r : requests) {
    longest = std::max(longest, std::min(r.prompt_tokens + r.output_tokens, c.max_position_embeddings));
  }
  const std::int64_t budget_requests = args.kv_budget > 0 ? 0 : args.kv_budget_requests;
  const std::int64_t budget =
      args.kv_budget > 0 ? args.kv_budget : fp16_budget_bytes(c, page_bytes, longest, budget_requests);

  std::vector<ServingRunConfig> rows;
  ServingRunConfig base;
  base.kv_budget_bytes = budget;
  base.page_bytes = page_bytes;
  base.max_batch = args.max_batch;
  base.preemption = preemption;
  base.device = args.device;
  base.threads = args.threads;
  // Prefix caching: each paged row of a prefix-closed policy runs with the cache, then again as its
  // --no-prefix-cache baseline (the same reusable prefill, nothing reused), side by side.
  const bool reuse = args.prefix_cache || wc.name == "shared-prefix";
  const auto push_paged = [&](ServingRunConfig r) {
    if (reuse && make_policy(r.policy)->prefix_closed()) {
      r.prefix_cache = true;
      rows.push_back(r);
      r.prefix_cache = false;
      r.reusable_prefill = true;
      r.label += " --no-prefix-cache";
    }
    rows.push_back(r);
  };
  {
    ServingRunConfig r = base;
    r.label = "contiguous";
    r.policy = "full-fp16";
    r.contiguous = true;
    rows.push_back(r);
    r.label = "paged-fp16";
    r.contiguous = false;
    push_paged(r);
  }
  for (const std::string& spec : split_policy_list(args.policies)) {
    make_policy(spec);  // an unknown policy fails before anything runs
    ServingRunConfig r = base;
    r.label = spec;
    r.policy = spec;
    push_paged(r);
  }

  fmt::print("kvcheck bench --workload {}: {} ({} layers, {} kv heads, head_dim {}, context {}), device {}\n",
             args.workload_file.empty() ? wc.name : args.workload_file, model_name, c.num_hidden_layers,
             c.num_key_value_heads, c.head_dim, c.max_position_embeddings, args.device);
  fmt::print("{} requests (seed {}), prompt mean {:.1f}, output mean {:.1f} tokens; prompts from {}; arrival {}\n",
             requests.size(), args.seed, prompt_sum / n, output_sum / n, origin,
             args.rate > 0.0 ? fmt::format("Poisson, {} requests/s", args.rate) : std::string("all at once"));
  fmt::print("KV budget {} bytes ({:.2f} MiB{}) = {} pages of {} bytes; max batch {}; preemption {}\n", budget,
             static_cast<double>(budget) / (1024.0 * 1024.0),
             budget_requests > 0
                 ? fmt::format(": {} of the workload's longest request, {} tokens, in full fp16", budget_requests, longest)
                 : std::string(", --kv-budget"),
             budget / page_bytes, page_bytes, args.max_batch, args.preemption);
  const MachineRates machine = measure_machine_rates(resolved_threads(args.threads));
  fmt::print("roofline: copy bandwidth {:.2f} GB/s, compute {:.1f} GFLOP/s (the faster of Eigen's GEMM and linear_rows, {} copies at once; the copy on as many threads), measured in this run\n\n",
             machine.copy_bytes_per_s * 1e-9, machine.gemm_flops_per_s * 1e-9, machine.threads);

  std::vector<ServingResult> results;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ProgressBar bar(fmt::format("{} ({}/{})", rows[i].label, i + 1, rows.size()), "requests", args.quiet);
    results.push_back(run_serving(model, rows[i], requests, [&](std::int64_t d, std::int64_t t) { bar.update(d, t); }));
  }
  const ServingResult& paged = results[1];
  std::vector<Roofline> roofs;
  for (const ServingResult& r : results) {
    roofs.push_back(roofline(mean_decode_step_work(c, r), machine.copy_bytes_per_s, machine.gemm_flops_per_s));
  }
  // The roofline's tokens/s at the row's mean batch.
  const auto roof_rate = [&](std::size_t i) {
    return roofs[i].predicted_s() > 0.0 ? results[i].mean_batch_size / roofs[i].predicted_s() : 0.0;
  };
  const auto compared = [&](const ServingResult& r) { return r.all_completed() && paged.all_completed(); };

  fmt::print("{:<22} {:>9} {:>8} {:>9} {:>7} {:>6} {:>8} {:>6} {:>8} {:>13} {:>11} {:>11} {:>7} {:>7} {:>9} {:>6} "
             "{:>9} {:>7} {:<9}\n",
             "policy", "done/sub", "ref/fail", "tok/s", "req/s", "batch", "peak MiB", "frag99", "preempt",
             "TTFT ms p50/99", "TPOT p50/99", "ITL p50/99", "x tok/s", "x batch", "roof tok/s", "x roof", "tg tok/s",
             "tg roof", "bound");
  for (std::size_t i = 0; i < results.size(); ++i) {
    const ServingResult& r = results[i];
    fmt::print("{:<22} {:>9} {:>8} {:>9} {:>7} {:>6.1f} {:>8.2f} {:>6.3f} {:>8} {:>13} {:>11} {:>11} {:>7} {:>7.2f} "
               "{:>9.1f} {:>6} {:>9} {:>7} {:<9}\n",
               r.label.size() > 22 ? r.label.substr(0, 21) + "~" : r.label,
               fmt::format("{}/{}", r.requests_completed, r.requests_submitted),
               fmt::format("{}/{}", r.requests_refused, r.requests_failed - r.requests_refused),
               rate_cell(r.all_completed(), r.output_tokens_per_s, 1), rate_cell(r.all_completed(), r.requests_per_s, 2),
               r.mean_batch_size, static_cast<double>(r.peak_kv_bytes) / (1024.0 * 1024.0), r.fragmentation.p99,
               fmt::format("{}r {}s", r.preemptions_recompute, r.preemptions_swap), ms(r.ttft_s), ms(r.tpot_s),
               ms(r.itl_s), rate_cell(compared(r), ratio(r.output_tokens_per_s, paged.output_tokens_per_s), 2),
               ratio(r.mean_batch_size, paged.mean_batch_size), roof_rate(i),
               rate_cell(r.all_completed(), ratio(r.output_tokens_per_s, roof_rate(i)), 2),
               rate_cell(r.all_completed(), r.generation_tokens_per_s, 1),
               rate_cell(r.all_completed(), ratio(r.generation_tokens_per_s, roof_rate(i)), 2),
               roofs[i].bandwidth_bound() ? "bandwidth" : "compute");
  }
  fmt::print("\ntok/s: generated tokens over the makespan; batch: mean requests per decode step; peak MiB: KV pages "
             "in use (contiguous: reserved) at the worst step;\nfrag99: p99 over steps of 1 - live / allocated "
             "slots; preempt: by recompute (r) and swap (s); ratios (x) against paged-fp16;\nroof tok/s: the mean "
             "batch over the roofline's step time, max(bytes a step reads (weights + mean stored KV) / copy "
             "bandwidth,\nFLOPs / compute rate); x roof: tok/s over it; tg tok/s: decode tokens over the steps' time "
             "outside prefill; tg roof: tg tok/s over the roofline;\nbound: which of the two is larger. ref/fail: "
             "requests refused at submission / failed while running;\n'-': the configuration did not complete every "
             "request, so its rates cover only part of the workload and are not compared.\n");
  for (const ServingResult& r : results) {
    if (!r.all_completed()) {
      fmt::print("{}: {} of {} requests refused at submission, {} failed while running: no throughput is given "
                 "(generated {} of {} tokens asked for)\n",
                 r.label, r.requests_refused, r.requests_submitted, r.requests_failed - r.requests_refused,
                 r.output_tokens, r.tokens_requested);
    }
    for (const std::string& e : r.errors) fmt::print("{}: {}\n", r.label, e);
  }
  if (std::any_of(results.begin(), results.end(), [](const ServingResult& r) { return r.transfers.has_value(); })) {
    // What crossed between host and device, per decode step (design.md §15's ledger).
    fmt::print("\n{:<34} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}\n", "per decode step (KiB)", "to dev", "to host",
               "kv up", "kv down", "plan", "tables", "logits");
    for (const ServingResult& r : results) {
      if (!r.transfers || r.decode_steps == 0) continue;
      const TransferCounts& t = *r.transfers;
      const auto kib = [&](std::int64_t bytes) {
        return static_cast<double>(bytes) / 1024.0 / static_cast<double>(r.decode_steps);
      };
      fmt::print("{:<34} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f} {:>9.1f}\n",
                 r.label.size() > 34 ? r.label.substr(0, 33) + "~" : r.label,
                 kib(traffic_bytes(t, Direction::kToDevice)), kib(traffic_bytes(t, Direction::kToHost)),
                 kib(t.of(Direction::kToDevice, Transfer::kKv)), kib(t.of(Direction::kToHost, Transfer::kKv)),
                 kib(t.of(Direction::kToDevice, Transfer::kPlan)), kib(t.of(Direction::kToDevice, Transfer::kTables)),
                 kib(t.of(Direction::kToHost, Transfer::kLogits)));
    }
    fmt::print("to dev / to host: every kind but the weights' one upload, over the decode steps (prefill runs on the "
               "host-copy path, not counted);\nkv up: pages the host changed (written tokens, moves, prompts); kv "
               "down: new keys and values for quantize-on-write on the host;\nplan: attention descriptors; tables: "
               "changed page-table rows; logits: the rows asked for.\n");
  }
  if (reuse) {
    fmt::print("\n{:<34} {:>12} {:>12} {:>7} {:>11} {:>9} {:>9} {:>9} {:>14}\n", "prefix reuse", "prefill tok",
               "saved tok", "saved", "shared pk", "COW", "evicted", "tok/s", "TTFT ms p50/99");
    for (std::size_t i = 0; i < results.size(); ++i) {
      const ServingResult& r = results[i];
      if (!rows[i].prefix_cache && !rows[i].reusable_prefill) continue;
      const std::int64_t prompt = r.prefill_tokens + r.prefix_hit_tokens;
      fmt::print("{:<34} {:>12} {:>12} {:>6.1f}% {:>11} {:>9} {:>9} {:>9} {:>14}\n",
                 r.label.size() > 34 ? r.label.substr(0, 33) + "~" : r.label, r.prefill_tokens, r.prefix_hit_tokens,
                 prompt > 0 ? 100.0 * static_cast<double>(r.prefix_hit_tokens) / static_cast<double>(prompt) : 0.0,
                 r.peak_shared_pages, r.cow_copies, r.prefix_evictions,
                 rate_cell(r.all_completed(), r.output_tokens_per_s, 1), ms(r.ttft_s));
    }
    fmt::print("prefill tok: prompt tokens computed (replays after a preemption by recompute included); saved tok: "
               "taken from the prefix cache instead;\nshared pk: pages two or more running requests listed at once, "
               "at the peak; COW: copy-on-write copies; evicted: cached pages evicted (whole pages of every head).\n");
  }

  if (!args.json.empty()) {
    nlohmann::json rows_json = nlohmann::json::array();
    for (std::size_t i = 0; i < results.size(); ++i) {
      const ServingResult& r = results[i];
      rows_json.push_back({
          {"policy", r.label},
          {"policy_spec", r.policy},
          {"contiguous", rows[i].contiguous},
          {"prefix_cache", rows[i].prefix_cache},
          {"prefill_tokens", r.prefill_tokens},
          {"prefix_hit_tokens", r.prefix_hit_tokens},
          {"peak_shared_pages", r.peak_shared_pages},
          {"cow_copies", r.cow_copies},
          {"prefix_evictions", r.prefix_evictions},
          {"requests_submitted", r.requests_submitted},
          {"requests_completed", r.requests_completed},
          {"requests_failed", r.requests_failed},
          {"requests_refused", r.requests_refused},
          {"all_completed", r.all_completed()},
          {"errors", r.errors},
          {"tokens_requested", r.tokens_requested},
          {"output_tokens", r.output_tokens},
          {"output_tokens_per_s", comparable_json(r.all_completed(), r.output_tokens_per_s)},
          {"requests_per_s", comparable_json(r.all_completed(), r.requests_per_s)},
          {"partial_output_tokens_per_s", r.output_tokens_per_s},
          {"decode_tokens", r.decode_tokens},
          {"generation_s", r.generation_s},
          {"generation_tokens_per_s", comparable_json(r.all_completed(), r.generation_tokens_per_s)},
          {"mean_batch_size", r.mean_batch_size},
          {"max_batch_seen", r.max_batch_seen},
          {"peak_kv_bytes", r.peak_kv_bytes},
          {"fragmentation_p50", r.fragmentation.p50},
          {"fragmentation_p99", r.fragmentation.p99},
          {"fragmentation_mean", r.fragmentation.mean},
          {"preemptions", r.preemptions_recompute + r.preemptions_swap},
          {"preemptions_by_kind", {{"recompute", r.preemptions_recompute}, {"swap", r.preemptions_swap}}},
          {"recomputed_tokens", r.recomputed_tokens},
          {"replayed_rows", r.replayed_rows},
          {"swapped_bytes", r.swapped_bytes},
          {"ttft_s", percentiles_json(r.ttft_s)},
          {"tpot_s", percentiles_json(r.tpot_s)},
          {"itl_s", percentiles_json(r.itl_s)},
          {"makespan_s", r.makespan_s},
          {"skipped_idle_s", r.skipped_idle_s},
          {"wall_s", r.wall_s},
          {"steps", r.steps},
          {"decode_steps", r.decode_steps},
          {"transfers", transfers_json(r)},
          {"roofline", roofline_json(mean_decode_step_work(c, r), roofs[i], roof_rate(i),
                                     comparable_json(r.all_completed(), ratio(r.output_tokens_per_s, roof_rate(i))),
                                     comparable_json(r.all_completed(), ratio(r.generation_tokens_per_s, roof_rate(i))))},
          {"ratios_vs_paged_fp16",
           {{"output_tokens_per_s", comparable_json(compared(r), ratio(r.output_tokens_per_s, paged.output_tokens_per_s))},
            {"requests_per_s", comparable_json(compared(r), ratio(r.requests_per_s, paged.requests_per_s))},
            {"mean_batch_size", ratio(r.mean_batch_size, paged.mean_batch_size)},
            {"peak_kv_bytes", ratio(static_cast<double>(r.peak_kv_bytes), static_cast<double>(paged.peak_kv_bytes))}}},
      });
    }
    write_json_atomically(args.json,
                          {{"format", "kvcheck-bench-serving"},
                           {"version", 3},
                           {"model", model_name},
                           {"device", args.device},
                           {"threads", args.threads},
                           {"workload",
                            {{"name", wc.name},
                             {"file", args.workload_file},
                             {"requests", requests.size()},
                             {"seed", args.seed},
                             {"rate", args.rate},
                             {"reasoning_cap", args.reasoning_cap},
                             {"mean_prompt_tokens", prompt_sum / n},
                             {"mean_output_tokens", output_sum / n},
                             {"longest_request_tokens", longest}}},
                           {"kv_budget_bytes", budget},
                           {"kv_budget_requests", budget_requests},
                           {"page_bytes", page_bytes},
                           {"pool_pages", budget / page_bytes},
                           {"max_batch", args.max_batch},
                           {"preemption", args.preemption},
                           {"machine",
                            {{"copy_bytes_per_s", machine.copy_bytes_per_s},
                             {"gemm_flops_per_s", machine.gemm_flops_per_s},
                             {"threads", machine.threads}}},
                           {"results", rows_json}},
                          "--json");
    fmt::print("json: {}\n", args.json);
  }
  return 0;
}

}  // namespace kvcheck::cli
