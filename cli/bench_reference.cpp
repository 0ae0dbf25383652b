// kvcheck bench --reference-prefill: the reference's prefill (ReferenceModel::forward_from over
// --tokens random ids, the logits of the last row only) against its roofline, both in this run:
// the double compute rate (the faster of Eigen's double GEMM and the reference's own dot_rows on
// 1024^3 operands) and the copy bandwidth on the same threads (bench/bench_baselines.h), the
// FLOPs and bytes of bench/reference_roofline.h, roofline time = max(FLOPs / compute rate, bytes /
// copy bandwidth), and the ratio roofline / measured (1: the forward runs at its products' ceiling).
// The forward's time is also given per part (ForwardProfile): projections, attention, lm_head and
// the element-wise rest.
//
// JSON (--json FILE, written atomically): format "kvcheck-bench-reference-prefill", version 1;
// model, tokens, first_logit_row, threads, seed; machine {gemm_double_flops_per_s (the compute
// rate the roofline takes), eigen_gemm_double_flops_per_s, dot_rows_flops_per_s,
// copy_bytes_per_s}; work {projection_flops, attention_flops, lm_head_flops, flops, bytes};
// measured {seconds, projections_s, attention_s, lm_head_s, other_s}; roofline {compute_s,
// bandwidth_s, seconds, bound}; ratio (roofline seconds / measured seconds).
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "bench/bench_baselines.h"
#include "bench/reference_roofline.h"
#include "cli/commands.h"
#include "cli/json_file.h"
#include "reference/errors.h"
#include "reference/model.h"

namespace kvcheck::cli {

int run_reference_prefill_bench(const BenchArgs& args) {
  std::filesystem::path dir;
  ReferenceModel model = bench_model(args, dir);
  const std::string model_name = dir.empty() ? model.origin() : dir.string();
  const ModelConfig& c = model.config();
  if (args.tokens > c.max_position_embeddings) {
    throw input_error("kvcheck bench", "--tokens", "{} tokens exceed max_position_embeddings {} of {}", args.tokens,
                      c.max_position_embeddings, model_name);
  }
  const int threads =
      args.threads > 0 ? args.threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  model.set_threads(threads);

  std::mt19937_64 rng(args.seed);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(c.vocab_size - 1));
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(args.tokens));
  for (std::int32_t& t : tokens) t = id(rng);
  const std::int64_t first = args.tokens - 1;

  // The two rates first, on the threads the forward runs, then the forward.
  const double eigen = eigen_gemm_double_flops_per_s(threads);
  const double dot = dot_rows_flops_per_s(threads);
  const double gemm = reference_compute_flops_per_s(threads);
  const double copy = copy_bandwidth_bytes_per_s(threads);
  ForwardProfile prof;
  const auto start = std::chrono::steady_clock::now();
  const MatrixRM logits = model.forward_from(tokens, first, nullptr, &prof);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (logits.rows() != 1 || !logits.allFinite()) {
    throw std::runtime_error("bench --reference-prefill: the forward gave no finite last row of logits");
  }

  const ReferencePrefillWork work = reference_prefill_work(c, args.tokens, first);
  const double compute_s = work.flops() / gemm;
  const double bandwidth_s = work.bytes / copy;
  const double roof_s = std::max(compute_s, bandwidth_s);
  const char* bound = bandwidth_s > compute_s ? "bandwidth-bound" : "compute-bound";
  const double ratio = roof_s / seconds;

  fmt::print("kvcheck bench --reference-prefill: {} ({} layers, hidden {}, {} heads / {} kv heads of {}), {} tokens, "
             "logits of the last row, {} threads\n",
             model_name, c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
             args.tokens, threads);
  fmt::print("machine (this run, {} threads): double compute {:.2f} GFLOP/s (Eigen GEMM {:.2f}, dot_rows {:.2f}), "
             "copy {:.2f} GB/s\n",
             threads, gemm * 1e-9, eigen * 1e-9, dot * 1e-9, copy * 1e-9);
  fmt::print("work: {:.1f} GFLOP (projections {:.1f}, attention {:.1f}, lm_head {:.2f}), {:.2f} GB\n",
             work.flops() * 1e-9, work.projection_flops * 1e-9, work.attention_flops * 1e-9, work.lm_head_flops * 1e-9,
             work.bytes * 1e-9);
  fmt::print("measured: {:.2f} s (projections {:.2f}, attention {:.2f}, lm_head {:.2f}, element-wise and rest {:.2f})\n",
             seconds, prof.projections_s, prof.attention_s, prof.lm_head_s, prof.other_s);
  fmt::print("roofline: {:.2f} s ({}: compute {:.2f} s, bandwidth {:.2f} s); roofline / measured = {:.3f}\n", roof_s,
             bound, compute_s, bandwidth_s, ratio);

  if (!args.json.empty()) {
    nlohmann::json j;
    j["format"] = "kvcheck-bench-reference-prefill";
    j["version"] = 1;
    j["model"] = model_name;
    j["tokens"] = args.tokens;
    j["first_logit_row"] = first;
    j["threads"] = threads;
    j["seed"] = args.seed;
    j["machine"] = {{"gemm_double_flops_per_s", gemm},
                    {"eigen_gemm_double_flops_per_s", eigen},
                    {"dot_rows_flops_per_s", dot},
                    {"copy_bytes_per_s", copy}};
    j["work"] = {{"projection_flops", work.projection_flops},
                 {"attention_flops", work.attention_flops},
                 {"lm_head_flops", work.lm_head_flops},
                 {"flops", work.flops()},
                 {"bytes", work.bytes}};
    j["measured"] = {{"seconds", seconds},
                     {"projections_s", prof.projections_s},
                     {"attention_s", prof.attention_s},
                     {"lm_head_s", prof.lm_head_s},
                     {"other_s", prof.other_s}};
    j["roofline"] = {{"compute_s", compute_s}, {"bandwidth_s", bandwidth_s}, {"seconds", roof_s}, {"bound", bound}};
    j["ratio"] = ratio;
    write_json_atomically(args.json, j, "--json");
    fmt::print("json: {}\n", args.json);
  }
  return 0;
}

}  // namespace kvcheck::cli
