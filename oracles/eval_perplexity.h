// Perplexity of a model on held-out documents, and the unigram baseline on the same tokens.
//
// Each document is tokenized with BOS first (tokenizer.encode(text, add_bos = true)) and cut into
// windows of at most C tokens that overlap by one token: window k covers tokens
// [k (C - 1), k (C - 1) + C), clipped to the document. Each window is run from position 0 with a
// fresh context and predicts all its tokens but its first, so every token after the document's
// first (the BOS) is predicted exactly once, and the first token of a later window is the last
// token of the one before (seen as context, not predicted again). Windows see at most C - 1
// tokens of context; the first token of every window after the first is not a BOS.
//
// perplexity = exp(total NLL / predicted tokens), natural log, NLL from the float logits through
// a double log-softmax; the unigram perplexity is over exactly the same predicted tokens under
// their own maximum-likelihood unigram distribution (accuracy_metrics.h).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "oracles/eval_data.h"
#include "oracles/eval_progress.h"
#include "reference/model.h"
#include "reference/tokenizer.h"

namespace kvcheck {

struct TokenWindow {
  std::int64_t begin = 0;  // first token (context only)
  std::int64_t end = 0;    // one past the last; tokens begin + 1 .. end - 1 are predicted
};

// The windows of a document of n_tokens tokens for context C >= 2 (rule above); none when
// n_tokens < 2. std::invalid_argument when context < 2.
std::vector<TokenWindow> perplexity_windows(std::int64_t n_tokens, std::int64_t context);

struct PerplexityResult {
  std::int64_t documents = 0;
  std::int64_t windows = 0;
  std::int64_t predicted_tokens = 0;
  std::int64_t context = 0;
  double nll_sum = 0.0;
  double perplexity = 0.0;
  double unigram_perplexity = 0.0;
};

// Runs `model` over every window of every document. `file` names the documents' file in errors
// (a token outside the model's vocabulary: InputError naming FILE:LINE and the document id; no
// predicted token at all: InputError naming the file). std::invalid_argument when context is
// outside [2, max_position_embeddings] (the caller checks the flag that set it).
PerplexityResult evaluate_perplexity(const ReferenceModel& model, const Tokenizer& tokenizer,
                                     std::span<const HeldoutDocument> documents, std::int64_t context,
                                     const std::string& file, const ProgressFn& progress = {});

}  // namespace kvcheck
