#include "oracles/eval_retrieval.h"

#include <algorithm>

#include <fmt/format.h>

#include "reference/errors.h"
#include "reference/generate.h"

namespace kvcheck {

namespace {

void check_ids(const ReferenceModel& model, const Tokenizer& tokenizer, std::span<const std::int32_t> ids,
               const std::string& where, const char* field) {
  for (const std::int32_t t : ids) {
    if (t < 0 || t >= model.config().vocab_size) {
      throw input_error(where, field, "token id {} (from {}) is outside the vocabulary [0, {}) of {}", t,
                        tokenizer.path().string(), model.config().vocab_size, model.origin());
    }
  }
}

}  // namespace

std::vector<std::int32_t> retrieval_answer_ids(const Tokenizer& tokenizer, const RetrievalItem& item,
                                               const std::string& where) {
  if (tokenizer.format() == "sentencepiece") return tokenizer.encode(item.answer, false);
  const std::vector<std::int32_t> prompt = tokenizer.encode(item.prompt, false);
  const std::vector<std::int32_t> whole = tokenizer.encode(item.prompt + " " + item.answer, false);
  if (whole.size() <= prompt.size() || !std::equal(prompt.begin(), prompt.end(), whole.begin())) {
    throw input_error(where, "answer",
                      "item '{}': the prompt's {} tokens are not a prefix of the tokens of prompt + \" \" + answer ({}) "
                      "with {}; the answer's tokens as a continuation are not defined",
                      item.id, prompt.size(), whole.size(), tokenizer.path().string());
  }
  return {whole.begin() + static_cast<std::ptrdiff_t>(prompt.size()), whole.end()};
}

RetrievalResult evaluate_retrieval(const ReferenceModel& model, const Tokenizer& tokenizer,
                                   std::span<const RetrievalItem> items, const std::string& file,
                                   const ProgressFn& progress) {
  const std::int64_t max_pos = model.config().max_position_embeddings;
  std::vector<std::vector<std::int32_t>> prompts;
  std::vector<std::vector<std::int32_t>> answers;
  for (const RetrievalItem& item : items) {
    const std::string where = fmt::format("{}:{}", file, item.line);
    prompts.push_back(tokenizer.encode(item.prompt, true));
    answers.push_back(retrieval_answer_ids(tokenizer, item, where));
    check_ids(model, tokenizer, prompts.back(), where, "prompt");
    check_ids(model, tokenizer, answers.back(), where, "answer");
    const auto p = static_cast<std::int64_t>(prompts.back().size());
    const auto a = static_cast<std::int64_t>(answers.back().size());
    if (p + a > max_pos) {
      throw input_error(where, "prompt",
                        "item '{}': {} prompt tokens + {} answer tokens = {} exceed max_position_embeddings {} of {}",
                        item.id, p, a, p + a, max_pos, model.origin());
    }
  }

  RetrievalResult r;
  const auto total = static_cast<std::int64_t>(items.size());
  if (progress) progress(0, total);
  for (std::size_t i = 0; i < items.size(); ++i) {
    GenerateOptions options;
    options.max_new_tokens = static_cast<std::int64_t>(answers[i].size());
    options.stop_at_eos = false;
    options.path = DecodePath::kKVCache;
    const GenerateResult g = generate_greedy(model, prompts[i], options);

    RetrievalItemResult item;
    item.id = items[i].id;
    item.task = items[i].task;
    item.length_bucket = items[i].length_bucket;
    item.prompt_tokens = static_cast<std::int64_t>(prompts[i].size());
    item.answer_ids = answers[i];
    item.generated = g.generated;
    item.generated_text = tokenizer.decode(g.generated);
    item.correct = exact_match(item.generated, item.answer_ids);
    r.overall.add(item.correct);
    r.by_length[item.length_bucket].add(item.correct);
    r.by_task[item.task].add(item.correct);
    r.items.push_back(std::move(item));
    if (progress) progress(static_cast<std::int64_t>(i) + 1, total);
  }
  return r;
}

}  // namespace kvcheck
