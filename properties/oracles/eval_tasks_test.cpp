// The evaluation tasks on a tiny random model with the test tokenizer: perplexity windows and
// perplexity against a direct computation from ReferenceModel::forward, retrieval exact match on
// an item built to be right and one built to be wrong, attention concentration on known
// distributions.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "oracles/attention_structure.h"
#include "oracles/eval_perplexity.h"
#include "oracles/eval_retrieval.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"
#include "reference/generate.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;

// The test tokenizer's vocabulary (512) and a short context, so windows are cut often.
ModelConfig eval_config() {
  testing::TinyShape s;
  s.vocab = 512;
  s.max_positions = 64;
  return testing::tiny_config(s);
}

const Tokenizer& test_tokenizer() {
  static const Tokenizer t = Tokenizer::load(testing::source_path("datasets/tiny/tokenizer.model"));
  return t;
}

// -log softmax(row)[target], written out plainly.
double direct_nll(const MatrixRM& logits, Eigen::Index row, std::int32_t target) {
  double m = -INFINITY;
  for (Eigen::Index j = 0; j < logits.cols(); ++j) m = std::max(m, static_cast<double>(logits(row, j)));
  double sum = 0.0;
  for (Eigen::Index j = 0; j < logits.cols(); ++j) sum += std::exp(static_cast<double>(logits(row, j)) - m);
  return m + std::log(sum) - static_cast<double>(logits(row, target));
}

TEST(EvalTasks, PerplexityWindowsOverlapByOneToken) {
  EXPECT_TRUE(perplexity_windows(0, 4).empty());
  EXPECT_TRUE(perplexity_windows(1, 4).empty());
  const auto w = perplexity_windows(6, 3);
  ASSERT_EQ(w.size(), 3U);
  EXPECT_EQ(w[0].begin, 0);
  EXPECT_EQ(w[0].end, 3);
  EXPECT_EQ(w[1].begin, 2);
  EXPECT_EQ(w[1].end, 5);
  EXPECT_EQ(w[2].begin, 4);
  EXPECT_EQ(w[2].end, 6);
  // Every token after the first is predicted exactly once, for many lengths and contexts.
  for (std::int64_t n = 0; n < 40; ++n) {
    for (std::int64_t c = 2; c < 12; ++c) {
      std::vector<int> predicted(static_cast<std::size_t>(n), 0);
      for (const TokenWindow& x : perplexity_windows(n, c)) {
        ASSERT_LE(x.end - x.begin, c);
        for (std::int64_t t = x.begin + 1; t < x.end; ++t) ++predicted[static_cast<std::size_t>(t)];
      }
      for (std::int64_t t = 0; t < n; ++t) ASSERT_EQ(predicted[static_cast<std::size_t>(t)], t == 0 ? 0 : 1) << n << " " << c;
    }
  }
  EXPECT_THROW(perplexity_windows(5, 1), std::invalid_argument);
}

TEST(EvalTasks, PerplexityEqualsADirectComputationFromForward) {
  const ModelConfig c = eval_config();
  const ReferenceModel model = testing::tiny_model(c, 11);
  const Tokenizer& tok = test_tokenizer();
  const std::vector<HeldoutDocument> docs{
      {"d1", "The cache holds the keys and the values of every token that the model has read so far.", 1},
      {"d2", "Reading a train timetable in the rain is slow work, and the weather does not help at all.", 2}};
  constexpr std::int64_t kContext = 8;
  const PerplexityResult r = evaluate_perplexity(model, tok, docs, kContext, "docs.jsonl");

  // Direct: windows [0, 8), [7, 15), ... run one by one, every token after the first predicted.
  double nll = 0.0;
  std::int64_t predicted = 0;
  std::int64_t windows = 0;
  std::map<std::int32_t, std::int64_t> counts;
  for (const HeldoutDocument& d : docs) {
    const std::vector<std::int32_t> ids = tok.encode(d.text, true);
    ASSERT_GT(ids.size(), 2 * kContext) << "documents must need several windows";
    for (std::size_t begin = 0; begin + 1 < ids.size(); begin += kContext - 1) {
      const std::size_t end = std::min(begin + kContext, ids.size());
      const std::vector<std::int32_t> window(ids.begin() + static_cast<std::ptrdiff_t>(begin),
                                             ids.begin() + static_cast<std::ptrdiff_t>(end));
      const MatrixRM logits = model.forward(window);
      for (std::size_t i = 0; i + 1 < window.size(); ++i) {
        nll += direct_nll(logits, static_cast<Eigen::Index>(i), window[i + 1]);
        ++counts[window[i + 1]];
        ++predicted;
      }
      ++windows;
    }
  }
  double entropy = 0.0;
  for (const auto& [t, n] : counts) {
    const double p = static_cast<double>(n) / static_cast<double>(predicted);
    entropy -= p * std::log(p);
  }
  EXPECT_EQ(r.documents, 2);
  EXPECT_EQ(r.windows, windows);
  EXPECT_EQ(r.predicted_tokens, predicted);
  EXPECT_NEAR(r.nll_sum, nll, 1e-9 * nll);
  EXPECT_NEAR(r.perplexity, std::exp(nll / static_cast<double>(predicted)), 1e-9 * r.perplexity);
  EXPECT_NEAR(r.unigram_perplexity, std::exp(entropy), 1e-9 * r.unigram_perplexity);
}

TEST(EvalTasks, PerplexityRejectsTokensOutsideTheModelVocabulary) {
  testing::TinyShape s;
  s.vocab = 40;  // smaller than the tokenizer's 512
  const ReferenceModel model = testing::tiny_model(testing::tiny_config(s), 3);
  const std::vector<HeldoutDocument> docs{{"doc-x", "weather and trains", 7}};
  expect_input_error([&] { evaluate_perplexity(model, test_tokenizer(), docs, 16, "h.jsonl"); },
                     {"h.jsonl:7", "doc-x", "text", "outside the vocabulary [0, 40)"});
}

// An answer that the model's greedy continuation of `prompt` spells exactly and that the
// tokenizer encodes back to the same ids; empty when the first few tokens do not round-trip.
std::string greedy_answer(const ReferenceModel& model, const std::string& prompt) {
  const Tokenizer& tok = test_tokenizer();
  for (std::int64_t n = 3; n >= 1; --n) {
    GenerateOptions o;
    o.max_new_tokens = n;
    o.stop_at_eos = false;
    const GenerateResult g = generate_greedy(model, tok.encode(prompt, true), o);
    const std::string text = tok.decode(g.generated);
    if (!text.empty() && tok.encode(text, false) == g.generated) return text;
  }
  return "";
}

TEST(EvalTasks, RetrievalExactMatchIsRightAndWrongWhereItShouldBe) {
  const ReferenceModel model = testing::tiny_model(eval_config(), 11);
  std::vector<RetrievalItem> items;
  const std::vector<std::string> prompts{"The pass key is 42. The pass key is", "The cache holds", "Rain on the train",
                                         "Keys and values", "Cooking in the morning"};
  std::string right_prompt;
  std::string right_answer;
  for (const std::string& p : prompts) {
    right_answer = greedy_answer(model, p);
    if (!right_answer.empty()) {
      right_prompt = p;
      break;
    }
  }
  ASSERT_FALSE(right_answer.empty()) << "no prompt whose greedy continuation round-trips through the tokenizer";
  items.push_back({"right", "passkey", 16, right_prompt, right_answer, 1});
  items.push_back({"wrong", "passkey", 32, right_prompt, right_answer + "zq", 2});
  items.push_back({"also-wrong", "kv", 32, right_prompt, "zzqx", 3});
  const RetrievalResult r = evaluate_retrieval(model, test_tokenizer(), items, "r.jsonl");
  ASSERT_EQ(r.items.size(), 3U);
  EXPECT_TRUE(r.items[0].correct) << "answer '" << right_answer << "', generated '" << r.items[0].generated_text << "'";
  EXPECT_EQ(r.items[0].generated_text, right_answer);
  EXPECT_FALSE(r.items[1].correct);
  EXPECT_FALSE(r.items[2].correct);
  EXPECT_EQ(r.items[1].generated.size(), r.items[1].answer_ids.size());
  EXPECT_EQ(r.overall.correct, 1);
  EXPECT_EQ(r.overall.total, 3);
  EXPECT_EQ(r.by_length.at(16).accuracy(), 1.0);
  EXPECT_EQ(r.by_length.at(32).accuracy(), 0.0);
  EXPECT_EQ(r.by_task.at("passkey").accuracy(), 0.5);
  EXPECT_EQ(r.by_task.at("kv").accuracy(), 0.0);
}

TEST(EvalTasks, RetrievalRejectsAPromptThatDoesNotFit) {
  const ReferenceModel model = testing::tiny_model(eval_config(), 11);  // 64 positions
  std::string long_prompt;
  for (int i = 0; i < 30; ++i) long_prompt += "the cache ";
  const std::vector<RetrievalItem> items{{"ok", "kv", 8, "short", "a", 1}, {"too-long", "kv", 512, long_prompt, "b", 2}};
  expect_input_error([&] { evaluate_retrieval(model, test_tokenizer(), items, "r.jsonl"); },
                     {"r.jsonl:2", "prompt", "'too-long'", "max_position_embeddings 64"});
}

TEST(EvalTasks, AttentionConcentrationOfKnownDistributions) {
  const std::vector<double> p{0.5, 0.2, 0.1, 0.1, 0.05, 0.05};
  const AttentionConcentration a = attention_concentration(p);
  EXPECT_EQ(a.first_token_mass, 0.5);
  EXPECT_EQ(a.top10_share, 0.5);  // ceil(0.6) = 1 token
  EXPECT_EQ(a.tokens_for_95, 5);  // 0.5 + 0.2 + 0.1 + 0.1 + 0.05
  EXPECT_DOUBLE_EQ(a.frac_for_95, 5.0 / 6.0);

  const std::vector<double> uniform(20, 0.05);
  const AttentionConcentration u = attention_concentration(uniform);
  EXPECT_DOUBLE_EQ(u.top10_share, 0.1);  // 2 tokens
  EXPECT_EQ(u.tokens_for_95, 19);        // 19 * 0.05 = 0.95 up to rounding
  EXPECT_DOUBLE_EQ(u.frac_for_95, 0.95);

  const std::vector<double> sink{1.0, 0.0, 0.0};
  EXPECT_EQ(attention_concentration(sink).tokens_for_95, 1);
}

TEST(EvalTasks, AttentionStructureAveragesTheLastQueries) {
  const ModelConfig c = eval_config();
  const ReferenceModel model = testing::tiny_model(c, 11);
  const std::vector<std::vector<std::int32_t>> prompts{testing::test_tokens(40, c.vocab_size, 1),
                                                       testing::test_tokens(5, c.vocab_size, 2),
                                                       {1}};
  const std::vector<HeadAttentionStats> stats = attention_structure(model, prompts, 32);
  ASSERT_EQ(stats.size(), static_cast<std::size_t>(c.num_hidden_layers * c.num_key_value_heads));
  for (const HeadAttentionStats& s : stats) {
    EXPECT_EQ(s.samples, 32 + 5 + 1);
    EXPECT_GT(s.first_token_mass, 0.0);
    EXPECT_LE(s.first_token_mass, 1.0);
    EXPECT_GE(s.top10_share, 0.1 - 1e-12);  // the top 10% hold at least 10% of the mass
    EXPECT_LE(s.top10_share, 1.0 + 1e-12);
    EXPECT_GT(s.frac_for_95, 0.0);
    EXPECT_LE(s.frac_for_95, 1.0);
  }
  EXPECT_EQ(stats[1].layer, 0);
  EXPECT_EQ(stats[1].kv_head, 1);
  // A one-token prompt alone: all the mass on the first token.
  const std::vector<std::vector<std::int32_t>> one{{1}};
  for (const HeadAttentionStats& s : attention_structure(model, one, 32)) {
    EXPECT_DOUBLE_EQ(s.first_token_mass, 1.0);
    EXPECT_DOUBLE_EQ(s.tokens_for_95, 1.0);
  }
}

}  // namespace
}  // namespace kvcheck
