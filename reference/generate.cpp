#include "reference/generate.h"

#include <algorithm>
#include <cmath>

#include "reference/errors.h"

namespace kvcheck {

std::int32_t argmax_token(std::span<const float> logits, std::int64_t position) {
  std::int32_t best = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (std::isnan(logits[i])) {
      throw input_error("logits", fmt::format("position {}", position), "NaN logit for token {}", i);
    }
    if (logits[i] > logits[best]) best = static_cast<std::int32_t>(i);
  }
  return best;
}

namespace {

std::span<const float> row_span(const MatrixRM& m, Eigen::Index row) {
  return {m.row(row).data(), static_cast<std::size_t>(m.cols())};
}

bool is_eos(const ModelConfig& c, std::int32_t token) {
  return std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), token) != c.eos_token_ids.end();
}

}  // namespace

GenerateResult generate_greedy(const ReferenceModel& model, std::span<const std::int32_t> prompt,
                               const GenerateOptions& options) {
  const ModelConfig& c = model.config();
  model.check_tokens(prompt, 0, "prompt");
  GenerateResult result;
  std::vector<std::int32_t> sequence(prompt.begin(), prompt.end());
  const auto budget = std::min<std::int64_t>(options.max_new_tokens,
                                             c.max_position_embeddings - static_cast<std::int64_t>(prompt.size()));
  std::vector<MatrixRM> kept;  // logits blocks in position order (KV-cache path)

  KVCache cache(c, std::min<std::int64_t>(c.max_position_embeddings,
                                          static_cast<std::int64_t>(prompt.size()) + std::max<std::int64_t>(budget, 0)));
  MatrixRM logits;
  result.stop_reason = "max_new_tokens";
  for (std::int64_t step = 0;; ++step) {
    // Logits of the last position of `sequence`.
    if (options.path == DecodePath::kKVCache) {
      const std::span<const std::int32_t> fresh(sequence.data() + cache.size(), sequence.size() - cache.size());
      logits = model.forward(fresh, cache);
      if (options.keep_logits) kept.push_back(logits);
    } else {
      logits = model.forward(sequence);
    }
    if (step == options.max_new_tokens) break;
    if (static_cast<std::int64_t>(sequence.size()) >= c.max_position_embeddings) {
      result.stop_reason = "max_position_embeddings";
      break;
    }
    const std::int32_t next = argmax_token(row_span(logits, logits.rows() - 1),
                                           static_cast<std::int64_t>(sequence.size()) - 1);
    result.generated.push_back(next);
    sequence.push_back(next);
    if (options.stop_at_eos && is_eos(c, next)) {
      result.stop_reason = "eos";
      if (options.path == DecodePath::kKVCache && options.keep_logits) {
        kept.push_back(model.forward(std::span<const std::int32_t>(&sequence.back(), 1), cache));
      }
      if (options.path == DecodePath::kFullRecompute) logits = model.forward(sequence);
      break;
    }
  }

  if (options.keep_logits) {
    if (options.path == DecodePath::kKVCache) {
      Eigen::Index rows = 0;
      for (const MatrixRM& m : kept) rows += m.rows();
      result.logits.resize(rows, c.vocab_size);
      Eigen::Index at = 0;
      for (const MatrixRM& m : kept) {
        result.logits.middleRows(at, m.rows()) = m;
        at += m.rows();
      }
    } else {
      result.logits = logits;  // the last step recomputed every position of the final sequence
    }
  }
  return result;
}

}  // namespace kvcheck
