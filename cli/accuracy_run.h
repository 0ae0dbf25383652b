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
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/verify_prompts.h"
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

// Runs `spec` over the inputs (the per-step oracle over the first `oracle_prompts` prompts, in a
// separate pass so that it does not disturb the measured run; the retrieval items unless
// `retrieval` is false; the engine's outputs into `capture` when given).
AccuracyRow measure_accuracy(const ReferenceModel& model, const AccuracyInputs& inputs, const VerifyArgs& args,
                             const std::string& spec, std::int64_t oracle_prompts = 0, bool retrieval = true,
                             EngineCapture* capture = nullptr);

// The row's fields as verify --sweep and kvcheck report write them.
nlohmann::json accuracy_row_json(const AccuracyRow& row, const std::string& spec, std::int64_t budget);

}  // namespace kvcheck::cli
