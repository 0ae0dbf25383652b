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
  // Why generation stops now, or nullptr to go on. EOS first, then the token budget, then the context.
  const auto stop_reason = [&]() -> const char* {
    if (options.stop_at_eos && !result.generated.empty() && is_eos(c, result.generated.back())) return "eos";
    if (static_cast<std::int64_t>(result.generated.size()) >= options.max_new_tokens) return "max_new_tokens";
    if (static_cast<std::int64_t>(sequence.size()) >= c.max_position_embeddings) return "max_position_embeddings";
    return nullptr;
  };

  MatrixRM logits;  // of the latest forward; its last row is the prediction after sequence.back()
  for (;;) {
    const char* reason = stop_reason();
    // A forward is needed to pick the next token, or to keep the logits of the final sequence.
    if (reason == nullptr || options.keep_logits) {
      if (options.path == DecodePath::kKVCache) {
        const std::span<const std::int32_t> fresh(sequence.data() + cache.size(), sequence.size() - cache.size());
        // Without keep_logits only the last row is read: the lm_head runs for it alone.
        const auto first = options.keep_logits ? 0 : static_cast<std::int64_t>(fresh.size()) - 1;
        logits = model.forward_from(fresh, cache, first);
        if (options.keep_logits) kept.push_back(logits);
      } else {
        logits = model.forward_from(sequence, options.keep_logits ? 0 : static_cast<std::int64_t>(sequence.size()) - 1);
      }
    }
    if (reason != nullptr) {
      result.stop_reason = reason;
      break;
    }
    const std::int32_t next = argmax_token(row_span(logits, logits.rows() - 1),
                                           static_cast<std::int64_t>(sequence.size()) - 1);
    result.generated.push_back(next);
    sequence.push_back(next);
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
