// The kvcheck subcommands: each has an Args struct, an add_* that registers its flags with CLI11,
// and a run_* that does the work and returns the exit code (InputError propagates to main).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace kvcheck {
class ReferenceModel;
}  // namespace kvcheck

namespace kvcheck::cli {

std::string version_string();

struct GenerateArgs {
  std::string model;
  std::string prompt;
  std::string chat;  // one user message, rendered with the model's chat template
  std::string ids;  // "1,2,3"; parsed by parse_token_ids
  std::int64_t max_new_tokens = 16;
  std::string dump_logits;
  std::string feed_ids;  // FILE of ids teacher-forced after the prompt (read_feed_ids)
  std::string decode_path = "cache";
  bool no_bos = false;
  bool ignore_eos = false;
  std::string engine = "reference";  // or "optimized"
  std::string device = "cpu";
  std::string policy = "full-fp32";
  std::int64_t kv_pages = 0;
  std::int64_t page_bytes = 16 * 1024;
  int threads = 0;
};
void add_generate(CLI::App& app, GenerateArgs& args);
// "1, 2,3" -> {1, 2, 3}. InputError naming --ids and the index of anything that is not an
// integer; an empty or all-blank string gives an empty list.
std::vector<std::int64_t> parse_token_ids(const std::string& text);
// The ids of a --feed-ids file: integers separated by commas and/or whitespace (newlines
// included), e.g. "5, 17\n9". InputError naming the file and the index of anything that is not an
// integer, of an empty item between commas, or for a file without ids. Vocabulary and length are
// checked against the model by run_generate.
std::vector<std::int64_t> read_feed_ids(const std::filesystem::path& file);
int run_generate(const GenerateArgs& args);

struct VerifyArgs {
  std::string model;
  std::string device = "cpu";
  std::string policy = "full-fp32";
  std::int64_t prompts = 8;
  std::int64_t prompt_tokens = 64;
  std::int64_t max_new_tokens = 32;
  std::string feed = "greedy";  // greedy: the reference's greedy tokens; text: the held-out text
  std::int64_t kv_pages = 0;
  std::int64_t page_bytes = 16 * 1024;
  int threads = 0;
  std::uint64_t seed = 1;  // prompts of random ids, for a model without a tokenizer
  std::string heldout_file;    // --heldout: held-out text, JSONL (empty: <datasets>/eval/heldout.jsonl)
  std::string retrieval_file;  // --retrieval: retrieval items, JSONL (empty: <datasets>/eval/retrieval.jsonl)
  bool verify_each_step = false;  // the per-step oracle (exit 3 on a violation)
  bool sweep = false;              // every policy x budget: bytes, KL, top-1, perplexity, retrieval
  bool list_policies = false;      // print the registered policy names, one per line, and exit
  std::vector<std::string> sweep_policies;  // names (empty: every registered policy)
  std::vector<std::string> sweep_specs;     // full specs added as rows
  std::vector<std::int64_t> sweep_budgets{32, 64, 96, 128};
  std::int64_t sweep_retrieval = 60;
  std::int64_t xkv_calibrate = 0;  // XKV's averaged allocation from this many sampled prompts (0: off)
  std::int64_t duo_calibrate = 0;  // DuoAttention's retrieval heads from this many held-out retrieval items (0: off)
  std::string duo_rank = "output-error";  // --duo-calibrate's statistic: output-error or far-mass
  std::string json;
};
void add_verify(CLI::App& app, VerifyArgs& args);
int run_verify(const VerifyArgs& args);
int run_verify_sweep(const VerifyArgs& args);

struct ReportArgs {
  std::string model;
  std::string device = "cpu";
  std::vector<std::string> policies;          // names (empty: every registered policy)
  std::vector<std::int64_t> budgets;          // tokens per head (empty: the mode's default)
  std::string out;                            // directory of report.json, report.md, report.html
  std::string baseline;                       // compare with it (exit 1 on a regression)
  bool update_baseline = false;               // write --baseline from this run instead
  bool quick = false;                         // the test gate's size
  bool long_context = false;                  // --long: cli/report_long.h
  std::vector<std::int64_t> lengths, depths;  // --long: window lengths, retrieval depths (empty: the mode's)
  std::vector<std::string> fractions;         // --long: budgets as fractions of the context (empty: the mode's)
  std::int64_t prompts = 0, prompt_tokens = 0, max_new_tokens = 0, retrieval_items = -1, oracle_prompts = -1;  // 0 / -1: mode default
  std::string cache;                          // reference cache directory (default OUT/reference-cache)
  std::string heldout_file;                   // --heldout: held-out text, JSONL (empty: <datasets>/eval/heldout.jsonl)
  std::string retrieval_file;                 // --retrieval: retrieval items, JSONL (empty: <datasets>/eval/retrieval.jsonl)
  int threads = 0;
  bool quiet = false;
  std::string render;                         // --render: rewrite report.md / report.html from this report.json
  std::string command_line;                   // recorded in report.json
};
void add_report(CLI::App& app, ReportArgs& args);
int run_report(const ReportArgs& args);

// kvcheck export: the report's held-out windows and retrieval items as token ids (cli/items_file.h)
// to --out FILE.jsonl; the sizing flags are report's.
void add_export(CLI::App& app, ReportArgs& args);
int run_export(const ReportArgs& args);

// kvcheck compare: other engines' outputs on exported items held to the reference with the
// report's metrics, outputs and gate (cli/compare_command.cpp).
struct CompareArgs {
  std::string model;
  std::string items;                        // the items file kvcheck export wrote
  std::vector<std::string> engine_outputs;  // --engine-output PATH (repeatable), each with a --name
  std::vector<std::string> names;
  std::vector<std::string> policies;        // kvcheck policies run beside them (none by default)
  std::vector<std::int64_t> budgets;        // empty: the report's default for the items' size
  std::int64_t oracle_prompts = 1;
  std::string out;
  std::string baseline;
  bool update_baseline = false;
  std::string cache;
  std::string device = "cpu";
  int threads = 0;
  bool quiet = false;
  std::string write_engine_output;  // write kvcheck's own engine output (--policy) in the format, then exit
  std::string policy;
  std::int64_t top_k = 0;
  std::string command_line;
};
void add_compare(CLI::App& app, CompareArgs& args);
int run_compare(const CompareArgs& args);

struct MakeModelArgs {
  bool random = false;
  std::string from_gguf;  // convert this GGUF file instead of drawing random weights
  std::string family = "llama";
  std::int64_t layers = 2;
  std::int64_t hidden = 64;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 0;      // 0: hidden / heads
  std::int64_t intermediate = 0;  // 0: 8/3 * hidden rounded up to a multiple of 32
  std::int64_t vocab = 0;         // 0: the tokenizer's vocabulary size
  std::int64_t max_positions = 2048;
  double rope_theta = 10000.0;
  bool tie = false;
  std::string dtype;  // f32, f16 or bf16; empty: f32, or the shape's bf16 with --shape
  std::string tokenizer;
  std::string tokenizer_json;  // copied to DIR/tokenizer.json (with its tokenizer_config.json, generation_config.json)
  std::string shape;           // a published shape (reference/dummy_model.h); excludes the shape flags
  std::uint64_t seed = 0;
  // Planted outlier key channels: in every layer and kv head, the rows of W_k (and of the k bias)
  // of the last `outlier_key_channels` channels of the head's first half (d/2 - 1, d/2 - 2, ...:
  // the lowest RoPE frequencies, which keep an outlier in place across positions) times
  // `outlier_scale`.
  std::int64_t outlier_key_channels = 0;
  double outlier_scale = 30.0;
  std::string out;
};
void add_make_model(CLI::App& app, MakeModelArgs& args);
int run_make_model(const MakeModelArgs& args);

// The datasets folder: $KVCHECK_DATASETS when set and non-empty, else the source tree's datasets/
// (compiled in as KVCHECK_DATASETS_DIR).
std::filesystem::path datasets_dir();

struct EvalArgs {
  std::string model;      // default: <datasets>/models/kvcheck-tiny
  std::string task = "all";
  std::string json;
  std::optional<std::int64_t> limit;
  std::string heldout;    // default: <datasets>/eval/heldout.jsonl
  std::string retrieval;  // default: <datasets>/eval/retrieval.jsonl
  std::optional<std::int64_t> context;  // default: min(max_position_embeddings, 512)
  bool quiet = false;
};
void add_eval(CLI::App& app, EvalArgs& args);
int run_eval(const EvalArgs& args);

// kvcheck bench: one benchmark mode per flag (--fragmentation for now); no mode is an error.
struct BenchArgs {
  bool fragmentation = false;
  bool engine = false;
  bool no_reference = false;  // --engine: skip the reference rows (a real model's reference is slow)
  bool reference_prefill = false;  // the reference's prefill against its roofline
  std::int64_t tokens = 8192;      // --reference-prefill: prompt length
  std::string model;
  std::string policy = "full-fp32";
  std::int64_t prompt_tokens = 64;
  std::int64_t new_tokens = 64;
  std::int64_t batch = 32;
  int threads = 0;
  std::string json;
  std::uint64_t seed = 1;
  std::int64_t requests = 0;  // 0: the mode's default (fragmentation 1000, serving 64)
  bool quiet = false;
  // The serving benchmark (--workload NAME or --workload-file FILE).
  std::string workload;
  std::string workload_file;
  std::string save_workload;
  std::string policies = "int8,kivi2,leankv,h2o,minikv";
  std::string device = "cpu";
  std::int64_t kv_budget = 0;    // bytes; 0: kv_budget_requests of the workload's longest request in full fp16
  std::int64_t kv_budget_requests = 8;
  bool prefix_cache = false;     // --prefix-cache: on for every workload (shared-prefix: always)
  std::int64_t repeat = 1;       // --engine: runs of each configuration
  std::int64_t page_bytes = 0;   // 0: 16 tokens of a full-fp16 head per page
  double rate = 0.0;             // requests per second (Poisson); 0: all at once
  std::int64_t reasoning_cap = 4096;
  std::int64_t max_batch = 256;
  std::string preemption = "auto";
  bool dummy_weights = false;       // random weights of --shape instead of --model
  std::string shape;
  std::int64_t dummy_layers = 0;    // 0: the shape's own layer count
};
void add_bench(CLI::App& app, BenchArgs& args);
int run_bench(const BenchArgs& args);
int run_engine_bench(const BenchArgs& args);
int run_serving_bench(const BenchArgs& args);
int run_reference_prefill_bench(const BenchArgs& args);
// The model a benchmark runs (cli/bench_serving.cpp): the checkpoint in --model (`dir` set to it;
// the embedded model by default), or dummy weights of --shape with --dummy-weights (`dir` left
// empty). Exit-2 errors for --model with --dummy-weights, --dummy-weights without --shape and
// --shape without --dummy-weights.
ReferenceModel bench_model(const BenchArgs& args, std::filesystem::path& dir);


struct HelpArgs {
  bool markdown = false;
};
void add_help(CLI::App& app, HelpArgs& args);
// Every command and option of `app` as Markdown: docs/cli.md.
std::string cli_markdown(const CLI::App& app);
int run_help(const CLI::App& app, const HelpArgs& args);

}  // namespace kvcheck::cli
