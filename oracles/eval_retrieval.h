// Exact-match accuracy on the synthetic retrieval tasks (eval_data.h for the file format).
//
// Per item: prompt_ids = encode(prompt, add_bos = true), answer_ids = retrieval_answer_ids (the
// ids the answer gets as the continuation of the prompt); the model generates answer_ids.size() tokens greedily with its KV cache,
// ignoring EOS; the item is correct iff the generated ids equal answer_ids. Accuracy is reported
// overall, per length_bucket and per task.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "oracles/accuracy_metrics.h"
#include "oracles/eval_data.h"
#include "oracles/eval_progress.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace kvcheck {

struct RetrievalItemResult {
  std::string id;
  std::string task;
  std::int64_t length_bucket = 0;
  std::int64_t prompt_tokens = 0;
  std::vector<std::int32_t> answer_ids;
  std::vector<std::int32_t> generated;
  std::string generated_text;  // tokenizer.decode(generated)
  bool correct = false;
};

struct RetrievalResult {
  std::vector<RetrievalItemResult> items;  // in file order
  AccuracyCounter overall;
  std::map<std::int64_t, AccuracyCounter> by_length;  // by length_bucket
  std::map<std::string, AccuracyCounter> by_task;
};

// The ids the answer gets where it follows its prompt (the text prompt + " " + answer).
// SentencePiece: encode(answer, false), whose dummy-prefix space is that " ". tokenizer.json
// (byte-level BPE: the space and merges across the boundary belong to the answer's ids):
// encode(prompt + " " + answer, false) less the leading encode(prompt, false); InputError naming
// `where` and the item when the prompt's ids are not a prefix of those, or the answer gets no ids.
std::vector<std::int32_t> retrieval_answer_ids(const Tokenizer& tokenizer, const RetrievalItem& item,
                                               const std::string& where);

// Every item is checked before any is run: InputError naming FILE:LINE, the field and the item id
// when prompt + answer tokens exceed max_position_embeddings or a token is outside the vocabulary.
RetrievalResult evaluate_retrieval(const ReferenceModel& model, const Tokenizer& tokenizer,
                                   std::span<const RetrievalItem> items, const std::string& file,
                                   const ProgressFn& progress = {});

}  // namespace kvcheck
