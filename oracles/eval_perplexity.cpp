#include "oracles/eval_perplexity.h"

#include <stdexcept>

#include <fmt/format.h>

#include "oracles/accuracy_metrics.h"
#include "reference/errors.h"

namespace kvcheck {

std::vector<TokenWindow> perplexity_windows(std::int64_t n_tokens, std::int64_t context) {
  if (context < 2) throw std::invalid_argument("perplexity_windows: context must be at least 2");
  std::vector<TokenWindow> windows;
  for (std::int64_t begin = 0; begin + 1 < n_tokens; begin += context - 1) {
    windows.push_back({begin, std::min(begin + context, n_tokens)});
  }
  return windows;
}

PerplexityResult evaluate_perplexity(const ReferenceModel& model, const Tokenizer& tokenizer,
                                     std::span<const HeldoutDocument> documents, std::int64_t context,
                                     const std::string& file, const ProgressFn& progress) {
  const ModelConfig& c = model.config();
  if (context < 2 || context > c.max_position_embeddings) {
    throw std::invalid_argument(fmt::format("evaluate_perplexity: context {} outside [2, {}]", context,
                                            c.max_position_embeddings));
  }
  // Tokenize everything first so that progress counts windows and a bad token fails early.
  std::vector<std::vector<std::int32_t>> tokens;
  std::int64_t total_windows = 0;
  for (const HeldoutDocument& d : documents) {
    tokens.push_back(tokenizer.encode(d.text, true));
    const std::string where = fmt::format("{}:{} (id '{}')", file, d.line, d.id);
    for (std::size_t i = 0; i < tokens.back().size(); ++i) {
      const std::int32_t t = tokens.back()[i];
      if (t < 0 || t >= c.vocab_size) {
        throw input_error(where, "text", "token id {} (from {}) is outside the vocabulary [0, {}) of {}", t,
                          tokenizer.path().string(), c.vocab_size, model.origin());
      }
    }
    total_windows += static_cast<std::int64_t>(perplexity_windows(static_cast<std::int64_t>(tokens.back().size()),
                                                                  context).size());
  }

  PerplexityResult r;
  r.documents = static_cast<std::int64_t>(documents.size());
  r.context = context;
  std::vector<std::int32_t> predicted;
  if (progress) progress(0, total_windows);
  for (const std::vector<std::int32_t>& doc : tokens) {
    for (const TokenWindow& w : perplexity_windows(static_cast<std::int64_t>(doc.size()), context)) {
      const std::span<const std::int32_t> window(doc.data() + w.begin, static_cast<std::size_t>(w.end - w.begin));
      const MatrixRM logits = model.forward(window);  // row i predicts window[i + 1]
      for (std::size_t i = 0; i + 1 < window.size(); ++i) {
        const auto row = static_cast<Eigen::Index>(i);
        r.nll_sum += token_nll(std::span<const float>(logits.row(row).data(), static_cast<std::size_t>(logits.cols())),
                               window[i + 1]);
        predicted.push_back(window[i + 1]);
      }
      ++r.windows;
      if (progress) progress(r.windows, total_windows);
    }
  }
  if (predicted.empty()) throw input_error(file, "text", "no token to predict: every document is a single token");
  r.predicted_tokens = static_cast<std::int64_t>(predicted.size());
  r.perplexity = perplexity(r.nll_sum, r.predicted_tokens);
  r.unigram_perplexity = unigram_perplexity(predicted);
  return r;
}

}  // namespace kvcheck
