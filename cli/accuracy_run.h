// One accuracy measurement of the optimized engine against the reference (kvcheck verify --sweep
// and kvcheck report share it):
//   text       held-out windows, each prompt_tokens of prompt and max_new_tokens of continuation
//              fed one decode step at a time: KL(P_ref || P_engine) statistics, top-1 agreement,
//              RMS Δp, and the engine's perplexity of the continuation;
//   bytes      at each prompt's last decode step, the KV bytes the cache holds for it relative
//              to full-fp16 holding the whole context, and the KV bytes that step's attention
//              read (every held byte, except for a page-selecting policy: Quest reads its chosen
//              pages and every page's key range);
//   memory     where the bytes are: tokens held per layer and bytes per (layer, kv head) at the
//              last step, and the pool's internal fragmentation at every decode step;
//   retrieval  items of the retrieval set, greedy exact match, overall and per length and task;
//   oracle     optionally, the per-step oracle (oracles/engine_step_oracle.h) on the first prompts.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/verify_prompts.h"
#include "optimized/engine.h"
#include "oracles/accuracy_metrics.h"
#include "oracles/attention_structure.h"
#include "oracles/eval_data.h"
#include "reference/model.h"

namespace kvcheck::cli {

// The reference's logits at every decode position of every prompt (row prompt_tokens - 1 onward)
// and its negative log-likelihood of the continuations; optionally its attention structure
// (oracles/attention_structure.h) over the queries of the continuation tokens.
struct TextReference {
  std::vector<std::vector<float>> rows;  // per prompt: [decode positions][vocab]
  double nll = 0.0;
  std::int64_t predicted = 0;
  std::vector<HeadAttentionStats> attention;  // per (layer, kv head), layer major; empty unless asked
};

struct RetrievalCase {
  RetrievalItem item;
  std::vector<std::int32_t> prompt, answer;
};

struct AccuracyInputs {
  std::vector<Prompt> prompts;  // prompt + continuation tokens
  std::string origin;
  std::filesystem::path heldout_file, retrieval_file;  // the files read (empty: not used)
  std::int64_t prompt_tokens = 0;
  std::vector<RetrievalCase> retrieval;
  std::int64_t retrieval_skipped = 0;  // items longer than the model's context (warned on stderr)
  TextReference reference;
};

// The prompts (args.prompts windows of args.prompt_tokens + args.max_new_tokens tokens of
// args.heldout_file) and args.sweep_retrieval items of args.retrieval_file, less those longer than the
// model's context (counted in retrieval_skipped, with a warning); the reference is left empty
// (compute_text_reference). A model without a tokenizer gets random-id prompts and no retrieval
// items; naming --heldout or --retrieval for it is an InputError.
AccuracyInputs prepare_accuracy_inputs(const ReferenceModel& model, const std::filesystem::path& dir,
                                       const VerifyArgs& args);
// With `attention`, also the attention structure of the queries at positions prompt_tokens ..
// end of every prompt (the continuation the engine decodes).
TextReference compute_text_reference(const ReferenceModel& model, const AccuracyInputs& inputs, bool attention = false);

struct AccuracyRow {
  std::string name;  // the policy's name, every parameter spelled out
  double bytes_ratio = 0.0;
  double read_ratio = 0.0;  // the KV bytes the last decode step's attention read, relative to the same
  double high_per_head = 0.0, low_per_head = 0.0;  // mean tokens per head at the last step
  // Means over the prompts, at each prompt's last decode step: tokens held per kv head of each
  // layer (the per-layer budgets XKV and PyramidKV choose), and each head's bytes relative to
  // full-fp16 holding the whole context ([layer][kv head]; their mean is bytes_ratio).
  std::vector<double> layer_tokens;
  std::vector<std::vector<double>> head_bytes_ratio;
  // The pool's internal fragmentation (1 - live slots / allocated slots, every head and tier) as
  // each decode step's attention reads the pages (after the step's reservation: its append,
  // eviction and any compaction), mean over the prompts.
  std::vector<double> fragmentation_by_step;
  DistributionSummary dist;
  double ppl = 0.0;
  AccuracyCounter overall;
  std::map<std::int64_t, AccuracyCounter> by_length;
  std::map<std::string, AccuracyCounter> by_task;
  std::int64_t oracle_checks = 0, oracle_violations = 0;  // 0 and 0 when the oracle did not run
  // A policy storing FP8: the elements stored over the text prompts, and those that saturated
  // (PagedKvCache::fp8_saturated).
  bool stores_fp8 = false;
  std::int64_t fp8_saturated = 0, fp8_stored = 0;
  double wall_s = 0.0;
};

// What the engine produced in measure_accuracy's measured run, for kvcheck compare
// --write-engine-output: per text prompt its logits at the continuation positions
// ([max_new_tokens][vocab], the rows compared with the reference's), per retrieval item its
// greedy tokens.
struct EngineCapture {
  std::vector<std::vector<float>> text_rows;
  std::vector<std::vector<std::int32_t>> generated;
};

// One policy's accuracy measurement on one engine, window by window and item by item: what
// measure_accuracy runs, open to a caller that feeds its own windows (kvcheck report --long).
// Text windows first, then retrieval items (the FP8 counts are the text windows').
class AccuracyRun {
 public:
  AccuracyRun(Engine& engine, const ModelConfig& c);
  AccuracyRun(const AccuracyRun&) = delete;
  AccuracyRun& operator=(const AccuracyRun&) = delete;

  // A held-out window `all`: its first P tokens prefilled, the rest fed one decode step at a time;
  // the engine's logits from row P - 1 compared with `reference_rows` ([rows][vocab]; rows at
  // most all.size() - P), and the bytes held at the last step. The engine's rows go to `capture`
  // when given. With `prefill` (ModelRunner::capture_prefill of the first P tokens), the prompt is
  // stored from it instead of computed: the same bits.
  void add_text(std::int64_t request, std::span<const std::int32_t> all, std::int64_t P,
                std::span<const float> reference_rows, EngineCapture* capture = nullptr,
                const PrefillCapture* prefill = nullptr);
  // add_text of several windows decoded together (engine_generate_batch: the weights read once
  // per step for all of them; each window's logits are its own alone, bit for bit). The pool must
  // hold them all. Counted in order, as add_text one after the other would; only the pool's
  // fragmentation differs (it is the pool's, and the pool then holds every window).
  struct TextWindow {
    std::int64_t request = 0;
    std::span<const std::int32_t> all;
    std::int64_t P = 0;
    std::span<const float> reference_rows;
    const PrefillCapture* prefill = nullptr;
  };
  void add_texts(std::span<const TextWindow> windows, EngineCapture* capture = nullptr);
  // The FP8 counts of the text windows so far; add_retrieval and finish call it.
  void finish_text();
  // A retrieval item, greedy: exact match counted; the tokens generated returned.
  std::vector<std::int32_t> add_retrieval(std::int64_t request, const RetrievalCase& rc,
                                          const PrefillCapture* prefill = nullptr);
  // add_retrieval of several items decoded together (engine_generate_batch), counted in order.
  struct RetrievalRun {
    std::int64_t request = 0;
    const RetrievalCase* item = nullptr;
    const PrefillCapture* prefill = nullptr;
  };
  std::vector<std::vector<std::int32_t>> add_retrievals(std::span<const RetrievalRun> items);
  // The row (oracle counts and wall time left 0). Call once.
  AccuracyRow finish();

  // The text windows' positions so far, and the engine's negative log-likelihood of their tokens.
  const DistributionComparison& distribution() const { return dist_; }
  double nll() const { return nll_; }
  std::int64_t predicted() const { return predicted_; }

 private:
  struct Held {
    double bytes = 0.0;
    double read = 0.0;  // the bytes the step's attention read (a page-selecting policy: its pages)
    std::int64_t high = 0, low = 0;
  };
  void on_decode_head(const DecodeHeadTrace& s);

  Engine& engine_;
  const ModelConfig& c_;
  RunnerTrace trace_;
  double fp16_bytes_per_token_ = 0.0, heads_ = 0.0;
  bool page_scales_ = false, text_finished_ = false;
  // Bytes and tokens held at each head's latest decode step of the current windows:
  // (request, layer, kv head).
  std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t>, Held> head_held_;
  // Per request of the current windows, per decode step (the pool's, whatever else it holds).
  std::map<std::int64_t, std::vector<double>> fragmentation_;
  std::vector<LiveToken> live_;
  std::vector<SlotRef> slots_;
  DistributionComparison dist_;
  double nll_ = 0.0, bytes_ratio_sum_ = 0.0, read_ratio_sum_ = 0.0, high_sum_ = 0.0, low_sum_ = 0.0;
  std::int64_t predicted_ = 0, windows_ = 0;
  std::vector<std::int64_t> fragmentation_samples_;
  AccuracyRow row_;
};

// Runs `spec` over the inputs (the per-step oracle over the first `oracle_prompts` prompts, in a
// separate pass so that it does not disturb the measured run; the retrieval items unless
// `retrieval` is false; the engine's outputs into `capture` when given).
AccuracyRow measure_accuracy(const ReferenceModel& model, const AccuracyInputs& inputs, const VerifyArgs& args,
                             const std::string& spec, std::int64_t oracle_prompts = 0, bool retrieval = true,
                             EngineCapture* capture = nullptr);

struct OracleCounts {
  std::int64_t checks = 0, violations = 0;
};
// The per-step oracle (oracles/engine_step_oracle.h) over the first `oracle_prompts` of
// `prompts` (prefill of P tokens, the rest fed), on an engine of its own running `run_spec`;
// prompt p's prefill taken from prefills[p] when given (not null); at most `max_steps` decode steps
// of each (0: every step).
OracleCounts run_step_oracle(const ReferenceModel& model, const VerifyArgs& args, const std::string& run_spec,
                             const std::vector<Prompt>& prompts, std::int64_t P, std::int64_t oracle_prompts,
                             std::span<const PrefillCapture* const> prefills = {}, std::int64_t max_steps = 0);

// The row's fields as verify --sweep and kvcheck report write them.
nlohmann::json accuracy_row_json(const AccuracyRow& row, const std::string& spec, std::int64_t budget);

}  // namespace kvcheck::cli
