// kvcheck eval: perplexity on held-out text, exact-match accuracy on the synthetic retrieval
// tasks and the attention-structure report, on the reference model.
//
// --limit N keeps the first N documents of the held-out set; N retrieval items spread over the
// (task, length_bucket) groups (retrieval_subset: round-robin over the groups, the first items of
// each in file order), so a small limit still covers every bucket and task; and N prompts of the
// longest length_bucket, chosen the same way, for the attention report (default 8). Every line of
// a file is validated whatever the limit.
//
// JSON (--json FILE, written atomically): format "kvcheck-eval", version 1; model, tasks, limit;
// perplexity, unigram_perplexity, perplexity_ratio, retrieval_accuracy,
// retrieval_accuracy_by_length (bucket as a string -> accuracy), retrieval_accuracy_by_task
// (null when their task did not run); ppl {heldout, documents, windows, context, window_overlap,
// predicted_tokens, nll_sum}; retrieval {file, items, correct, by_length, by_task, results: [{id,
// task, length_bucket, prompt_tokens, answer_tokens, correct, generated, generated_ids,
// answer_ids}]}; attention {file, length_bucket, prompts, query_positions, heads: [{layer, kv_head,
// samples, first_token_mass, top10_share, tokens_for_95, frac_for_95}], concentrated_heads,
// sink_heads, and their thresholds}.
#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/eval_files.h"
#include "cli/eval_output.h"
#include "cli/json_file.h"
#include "cli/output_file.h"
#include "cli/progress.h"
#include "oracles/attention_structure.h"
#include "oracles/eval_data.h"
#include "oracles/eval_perplexity.h"
#include "oracles/eval_retrieval.h"
#include "reference/errors.h"
#include "reference/gguf.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

namespace {

constexpr std::int64_t kDefaultContext = 512;
constexpr std::int64_t kDefaultAttentionPrompts = 8;

template <typename T>
std::vector<T> first_n(std::vector<T> v, std::optional<std::int64_t> limit) {
  if (limit && static_cast<std::int64_t>(v.size()) > *limit) v.resize(static_cast<std::size_t>(*limit));
  return v;
}

// The attention report's prompts: `count` items of the longest length_bucket, spread over tasks.
AttentionOutcome run_attention(const ReferenceModel& model, const Tokenizer& tokenizer,
                               const std::vector<RetrievalItem>& items, const std::string& file,
                               std::int64_t count, bool quiet) {
  AttentionOutcome a;
  a.file = file;
  for (const RetrievalItem& it : items) a.length_bucket = std::max(a.length_bucket, it.length_bucket);
  std::vector<RetrievalItem> longest;
  for (const RetrievalItem& it : items) {
    if (it.length_bucket == a.length_bucket) longest.push_back(it);
  }
  std::vector<std::vector<std::int32_t>> prompts;
  for (const RetrievalItem& it : retrieval_subset(longest, count)) {
    prompts.push_back(tokenizer.encode(it.prompt, true));
    const auto n = static_cast<std::int64_t>(prompts.back().size());
    if (n > model.config().max_position_embeddings) {
      throw input_error(fmt::format("{}:{}", file, it.line), "prompt",
                        "item '{}': {} prompt tokens exceed max_position_embeddings {} of {}", it.id, n,
                        model.config().max_position_embeddings, model.origin());
    }
  }
  a.prompts = static_cast<std::int64_t>(prompts.size());
  ProgressBar bar("attention", "prompts", quiet);
  a.heads = attention_structure(model, prompts, a.query_positions, bar.callback());
  return a;
}

}  // namespace

void add_eval(CLI::App& app, EvalArgs& args) {
  CLI::App* cmd = app.add_subcommand(
      "eval", "Perplexity, retrieval accuracy and attention structure of the reference model (default: the embedded model)");
  cmd->add_option("--model", args.model, "Model directory or GGUF file (default: <datasets>/models/kvcheck-tiny)");
  cmd->add_option("--task", args.task, "What to evaluate")
      ->capture_default_str()
      ->check(CLI::IsMember({"ppl", "retrieval", "attention", "all"}));
  cmd->add_option("--json", args.json, "Write the results as JSON to FILE (atomically)");
  cmd->add_option("--limit", args.limit,
                  "First N documents; N retrieval items spread over (task, length_bucket); N attention prompts (default 8)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--heldout", args.heldout, "Held-out text, JSONL (default: <datasets>/eval/heldout.jsonl)");
  cmd->add_option("--retrieval", args.retrieval, "Retrieval tasks, JSONL (default: <datasets>/eval/retrieval.jsonl)");
  cmd->add_option("--context", args.context, "Perplexity window in tokens (default: min(max_position_embeddings, 512))");
  cmd->add_flag("--quiet", args.quiet, "No progress on stderr");
  cmd->footer(
      "<datasets> is $KVCHECK_DATASETS when set, else the source tree's datasets/.\n"
      "heldout.jsonl lines: " + std::string(kHeldoutSchema) + "\nretrieval.jsonl lines: " + kRetrievalSchema);
}

int run_eval(const EvalArgs& args) {
  const std::filesystem::path data = datasets_dir();
  const bool default_model = args.model.empty();
  const std::filesystem::path dir = default_model ? data / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  const std::string heldout = heldout_path(args.heldout).string();
  const std::string retrieval = retrieval_path(args.retrieval).string();
  const bool all = args.task == "all";
  const bool do_ppl = all || args.task == "ppl";
  const bool do_retrieval = all || args.task == "retrieval";
  const bool do_attention = all || args.task == "attention";

  std::error_code ec;
  if (!is_gguf_file(dir) && !std::filesystem::exists(dir / "config.json", ec)) {
    throw input_error((dir / "config.json").string(), "--model", "not found: {} is not a model directory or a GGUF file{}",
                      dir.string(),
                      default_model ? " (the embedded default model; pass --model DIR or set KVCHECK_DATASETS)" : "");
  }
  if (!args.json.empty()) check_output_file(args.json, "--json");
  // The data files first: a malformed line is reported before any model work.
  std::vector<HeldoutDocument> documents;
  if (do_ppl) documents = first_n(load_heldout(heldout), args.limit);
  std::vector<RetrievalItem> items;
  if (do_retrieval || do_attention) items = load_retrieval(retrieval);

  const ReferenceModel model = ReferenceModel::load(dir);
  const std::optional<Tokenizer> tokenizer_found = Tokenizer::find(dir);
  if (!tokenizer_found) {
    throw input_error(dir.string(), "tokenizer", "eval needs the model's tokenizer (tokenizer.json or tokenizer.model)");
  }
  const Tokenizer& tokenizer = *tokenizer_found;
  const std::int64_t max_pos = model.config().max_position_embeddings;
  const std::int64_t context = args.context.value_or(std::min(max_pos, kDefaultContext));
  if (context < 2 || context > max_pos) {
    throw input_error("--context", std::to_string(context), "must be in [2, {}] (max_position_embeddings of {})", max_pos,
                      model.origin());
  }

  EvalOutcome outcome;
  outcome.model = dir.string();
  outcome.limit = args.limit;
  if (do_ppl) {
    outcome.tasks.push_back("ppl");
    outcome.heldout_file = heldout;
    ProgressBar bar("perplexity", "windows", args.quiet);
    outcome.ppl = evaluate_perplexity(model, tokenizer, documents, context, heldout, bar.callback());
  }
  if (do_retrieval) {
    outcome.tasks.push_back("retrieval");
    outcome.retrieval_file = retrieval;
    const std::vector<RetrievalItem> kept = args.limit ? retrieval_subset(items, *args.limit) : items;
    ProgressBar bar("retrieval", "items", args.quiet);
    outcome.retrieval = evaluate_retrieval(model, tokenizer, kept, retrieval, bar.callback());
  }
  if (do_attention) {
    outcome.tasks.push_back("attention");
    outcome.attention =
        run_attention(model, tokenizer, items, retrieval, args.limit.value_or(kDefaultAttentionPrompts), args.quiet);
  }

  fmt::print("{}", format_eval(outcome));
  if (!args.json.empty()) {
    write_json_atomically(args.json, eval_json(outcome), "--json");
    fmt::print("\njson: {}\n", args.json);
  }
  return 0;
}

}  // namespace kvcheck::cli
