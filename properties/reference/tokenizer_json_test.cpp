// tokenizer.json reader (reference/tokenizer_json*.cpp): the stages on small hand-made
// tokenizers (split behaviours, Metaspace prepend schemes, added-token flags, configs), invalid
// UTF-8, round trips and speed on the real Qwen3 tokenizer, and bad files refused with an
// InputError naming the file and the field.
#include <chrono>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "oracles/eval_retrieval.h"
#include "properties/support/test_support.h"
#include "reference/errors.h"
#include "reference/tokenizer.h"
#include "reference/tokenizer_json_text.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using testing::expect_input_error;
using testing::source_path;
using testing::TempDir;
using testing::write_file;

Tokenizer qwen3() { return Tokenizer::load(source_path("datasets/tokenizers/qwen3/tokenizer.json")); }

// A tokenizer whose vocabulary holds every piece the test expects, with ignore_merges and no
// decoder: decode() then joins the tokens with spaces, which shows how the text was cut.
json piece_tokenizer(const std::vector<std::string>& pieces) {
  json vocab = json::object();
  for (const auto& p : pieces) {
    if (!vocab.contains(p)) vocab[p] = static_cast<int>(vocab.size());
  }
  return json{{"version", "1.0"},
              {"added_tokens", json::array()},
              {"normalizer", nullptr},
              {"pre_tokenizer", nullptr},
              {"post_processor", nullptr},
              {"decoder", nullptr},
              {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", json::array()}, {"ignore_merges", true}}}};
}

Tokenizer load_json(const TempDir& dir, const json& j, const std::string& name = "tokenizer.json") {
  write_file(dir / name, j.dump());
  return Tokenizer::load(dir / name);
}

std::string pieces_of(const Tokenizer& tok, const std::string& text) { return tok.decode(tok.encode(text, false)); }

TEST(TokenizerJson, SplitBehavioursCutAsTokenizersDoes) {
  const std::vector<std::string> vocab = {"a", "b", "c", "-", "a-", "b-", "-b", "-c", "--"};
  auto with_split = [&](const std::string& behavior, bool invert) {
    json j = piece_tokenizer(vocab);
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "-"}}}, {"behavior", behavior}, {"invert", invert}};
    return j;
  };
  TempDir dir;
  const std::string text = "a-b--c";
  EXPECT_EQ(pieces_of(load_json(dir, with_split("Removed", false)), text), "a b c");
  EXPECT_EQ(pieces_of(load_json(dir, with_split("Isolated", false)), text), "a - b - - c");
  EXPECT_EQ(pieces_of(load_json(dir, with_split("MergedWithPrevious", false)), text), "a- b- - c");
  EXPECT_EQ(pieces_of(load_json(dir, with_split("MergedWithNext", false)), text), "a -b - -c");
  EXPECT_EQ(pieces_of(load_json(dir, with_split("Contiguous", false)), text), "a - b -- c");
  EXPECT_EQ(pieces_of(load_json(dir, with_split("Removed", true)), text), "- - -");
  json regex = with_split("Isolated", false);
  regex["pre_tokenizer"]["pattern"] = {{"Regex", "-+"}};
  EXPECT_EQ(pieces_of(load_json(dir, regex), text), "a - b -- c");
}

TEST(TokenizerJson, MetaspacePrependSchemes) {
  const std::string u = "\xE2\x96\x81";  // U+2581
  json base = piece_tokenizer({"a", "b", u, u + "a", u + "b", "<x>"});
  base["added_tokens"] = json::array({{{"id", 5}, {"content", "<x>"}, {"special", false}, {"normalized", false}}});
  auto with = [&](const std::string& scheme, bool split) {
    json j = base;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", u}, {"prepend_scheme", scheme}, {"split", split}};
    return j;
  };
  TempDir dir;
  // "first": only the piece at the start of the input gets the prefix, not the one after <x>.
  EXPECT_EQ(pieces_of(load_json(dir, with("first", true)), "a b<x>a"), u + "a " + u + "b <x> a");
  EXPECT_EQ(pieces_of(load_json(dir, with("always", true)), "a b<x>a"), u + "a " + u + "b <x> " + u + "a");
  EXPECT_EQ(pieces_of(load_json(dir, with("never", true)), "a b"), "a " + u + "b");
  // split false: one piece, cut by the model into its characters (no merges).
  EXPECT_EQ(pieces_of(load_json(dir, with("never", false)), "a b"), "a " + u + " b");
}

TEST(TokenizerJson, DigitsAndGpt2ByteLevelPreTokenizers) {
  TempDir dir;
  json digits = piece_tokenizer({"a", "1", "2", "12", "x"});
  digits["pre_tokenizer"] = {{"type", "Digits"}, {"individual_digits", true}};
  EXPECT_EQ(pieces_of(load_json(dir, digits), "a12x"), "a 1 2 x");
  digits["pre_tokenizer"]["individual_digits"] = false;
  EXPECT_EQ(pieces_of(load_json(dir, digits), "a12x"), "a 12 x");
  // GPT-2: ByteLevel with add_prefix_space and its own regex; a space is the byte-level U+0120.
  const std::string g = "\xC4\xA0";
  json gpt2 = piece_tokenizer({g + "Hello", g + "world", "'s", "!"});
  gpt2["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", true}};
  EXPECT_EQ(pieces_of(load_json(dir, gpt2), "Hello world's!"), g + "Hello " + g + "world 's !");
  gpt2["decoder"] = {{"type", "ByteLevel"}};
  const Tokenizer tok = load_json(dir, gpt2);
  EXPECT_EQ(tok.decode(tok.encode("Hello world's!", false)), " Hello world's!");
}

TEST(TokenizerJson, MetaspaceDecoderDropsThePrependedSpaceOnly) {
  const std::string u = "\xE2\x96\x81";
  json j = piece_tokenizer({u + "a", u + "b", "c"});
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", u}, {"prepend_scheme", "always"}, {"split", true}};
  j["decoder"] = {{"type", "Metaspace"}, {"replacement", u}, {"prepend_scheme", "always"}, {"split", true}};
  TempDir dir;
  const Tokenizer tok = load_json(dir, j);
  EXPECT_EQ(tok.encode("a b", false), (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(tok.decode(tok.encode("a b", false)), "a b");
  EXPECT_EQ(tok.decode(std::vector<std::int32_t>{2, 0, 1}), "c a b");
}

TEST(TokenizerJson, FindPrefersTokenizerJsonOverTokenizerModel) {
  TempDir dir;
  std::filesystem::copy_file(source_path("datasets/tiny/tokenizer.model"), dir / "tokenizer.model");
  EXPECT_EQ(Tokenizer::find(dir.path())->format(), "sentencepiece");
  write_file(dir / "tokenizer.json", piece_tokenizer({"a"}).dump());
  const auto tok = Tokenizer::find(dir.path());
  ASSERT_TRUE(tok.has_value());
  EXPECT_EQ(tok->format(), "tokenizer.json");
  EXPECT_EQ(tok->vocab_size(), 1);
}

TEST(TokenizerJson, AddedTokenFlags) {
  json j = piece_tokenizer({"a", "b", " ", "c", "<m>", "ab"});
  j["added_tokens"] = json::array({
      {{"id", 4}, {"content", "<m>"}, {"lstrip", true}, {"rstrip", true}, {"special", false}, {"normalized", false}},
      {{"id", 5}, {"content", "ab"}, {"single_word", true}, {"special", false}, {"normalized", false}},
  });
  TempDir dir;
  const Tokenizer tok = load_json(dir, j);
  // lstrip / rstrip take the spaces around <m> into the token.
  EXPECT_EQ(tok.encode("a  <m>  b", false), (std::vector<std::int32_t>{0, 4, 1}));
  // single_word: "ab" is the added token only where it is not inside a word.
  EXPECT_EQ(tok.encode("ab cab", false), (std::vector<std::int32_t>{5, 2, 3, 0, 1}));
}

TEST(TokenizerJson, NormalizedAddedTokenIsMatchedAfterTheNormalizer) {
  json j = piece_tokenizer({"x", "y", "\xC3\xA9"});  // é (NFC)
  j["normalizer"] = {{"type", "NFC"}};
  j["added_tokens"] = json::array({{{"id", 3}, {"content", "e\xCC\x81"}, {"normalized", true}, {"special", false}}});
  TempDir dir;
  const Tokenizer tok = load_json(dir, j);
  // The token's content is NFC-normalized too, so both spellings of é hit it.
  EXPECT_EQ(tok.encode("x\xC3\xA9y", false), (std::vector<std::int32_t>{0, 3, 1}));
  EXPECT_EQ(tok.encode("xe\xCC\x81y", false), (std::vector<std::int32_t>{0, 3, 1}));
}

TEST(TokenizerJson, InvalidUtf8IsReplacedLikePythonErrorsReplace) {
  const Tokenizer tok = qwen3();
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(tok.encode("a\xFF" "b", false), tok.encode("a" + fffd + "b", false));
  // A truncated 3-byte sequence is one maximal subpart: one U+FFFD.
  EXPECT_EQ(tok.encode("x\xE2\x82", false), tok.encode("x" + fffd, false));
  // An encoded surrogate is three ill-formed bytes: three U+FFFD.
  EXPECT_EQ(tok.encode("\xED\xA0\x80", false), tok.encode(fffd + fffd + fffd, false));
  EXPECT_EQ(tok.encode("\xC0\xAF", false), tok.encode(fffd + fffd, false));
  EXPECT_EQ(tok.decode(tok.encode("a\xFF" "b", false)), "a" + fffd + "b");
  // Any byte string: no throw, ids in range.
  std::mt19937 rng(2601);
  for (int i = 0; i < 300; ++i) {
    std::string bytes(rng() % 64, '\0');
    for (char& c : bytes) c = static_cast<char>(rng() & 0xFF);
    const auto ids = tok.encode(bytes, true);
    for (const auto id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << "seed 2601, input " << i;
    EXPECT_NO_THROW(tok.decode(ids));
  }
}

// The four-byte edges (Unicode table 3-7): F0 needs a second byte from 90, F4 one up to 8F (U+10FFFF
// is the last code point), F1-F3 any continuation. Past an edge the lead byte alone is the maximal
// subpart: one U+FFFD, then one per stray continuation byte.
TEST(TokenizerJson, Utf8RepairKeepsTheFourByteEdges) {
  const std::string fffd = "\xEF\xBF\xBD";
  for (const std::string ok : {"\xF0\x90\x80\x80", "\xF3\xBF\xBF\xBF", "\xF4\x80\x80\x80", "\xF4\x8F\xBF\xBF"}) {
    EXPECT_EQ(tokjson::utf8_repair(ok), ok);
  }
  EXPECT_EQ(tokjson::utf8_repair("\xF4\x90\x80\x80"), fffd + fffd + fffd + fffd);
  EXPECT_EQ(tokjson::utf8_repair("\xF0\x8F\xBF\xBF"), fffd + fffd + fffd + fffd);
  EXPECT_EQ(tokjson::utf8_repair("\xF4\x8F\xBF"), fffd);  // truncated: one maximal subpart
}

// utf8_encode's bytes at the edges of each length (1 to 4 bytes), and decoding gives the code
// point back.
TEST(TokenizerJson, Utf8EncodeKnownAnswersAndRoundTrip) {
  EXPECT_EQ(tokjson::utf8_encode(U'\u007F'), "\x7F");
  EXPECT_EQ(tokjson::utf8_encode(U'\u00E9'), "\xC3\xA9");          // é
  EXPECT_EQ(tokjson::utf8_encode(U'\u0800'), "\xE0\xA0\x80");
  EXPECT_EQ(tokjson::utf8_encode(U'\u20AC'), "\xE2\x82\xAC");      // €
  EXPECT_EQ(tokjson::utf8_encode(U'\uFFFD'), "\xEF\xBF\xBD");
  EXPECT_EQ(tokjson::utf8_encode(U'\U0001F600'), "\xF0\x9F\x98\x80");  // 😀
  EXPECT_EQ(tokjson::utf8_encode(U'\U0010FFFF'), "\xF4\x8F\xBF\xBF");
  for (char32_t cp = 1; cp < 0x110000; cp += 97) {
    if (cp >= 0xD800 && cp < 0xE000) continue;  // surrogates are not scalar values
    const std::string bytes = tokjson::utf8_encode(cp);
    ASSERT_EQ(tokjson::utf8_repair(bytes), bytes) << std::hex << static_cast<std::uint32_t>(cp);
    ASSERT_EQ(tokjson::utf8_decode_at(bytes, 0), cp) << std::hex << static_cast<std::uint32_t>(cp);
  }
}

// The ByteFallback decoder turns every "<0xXX>" piece into its byte, the ones below 0x10
// (newline, tab) included.
TEST(TokenizerJson, ByteFallbackDecodesEveryBytePiece) {
  json j = piece_tokenizer({"a", "<0x0A>", "<0x09>", "<0x41>", "<0x7e>"});
  j["decoder"] = {{"type", "ByteFallback"}};
  TempDir dir;
  const Tokenizer tok = load_json(dir, j);
  const std::vector<std::int32_t> ids{0, 1, 2, 3, 4};
  EXPECT_EQ(tok.decode(ids), "a\n\tA~");
}

TEST(TokenizerJson, Qwen3HasNoBosAndEndsTurnsWithImEnd) {
  const Tokenizer tok = qwen3();
  EXPECT_EQ(tok.format(), "tokenizer.json");
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.eos_id(), 151645);  // <|im_end|>, tokenizer_config.json's eos_token
  EXPECT_EQ(tok.vocab_size(), 151669);
  EXPECT_EQ(tok.encode("Hello world", true), tok.encode("Hello world", false));
  EXPECT_EQ(tok.encode("Hello world", false), (std::vector<std::int32_t>{9707, 1879}));
  // Special tokens are matched in the text and produce no text when decoded.
  EXPECT_EQ(tok.encode("<|im_start|>user", false), (std::vector<std::int32_t>{151644, 872}));
  EXPECT_EQ(tok.decode(tok.encode("<|im_start|>user", false)), "user");
}

TEST(TokenizerJson, LlamaStyleConfigRebuildsWhatAddSpecialTokensAdds) {
  json j = piece_tokenizer({"<unk>", "<s>", "</s>", "a"});
  j["added_tokens"] = json::array({{{"id", 1}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                                   {{"id", 2}, {"content", "</s>"}, {"special", true}, {"normalized", false}}});
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", json::array({{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
                                                 {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}})},
                         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {1}}, {"tokens", {"<s>"}}}}}}};
  TempDir dir;
  // No config: the template's leading token is the BOS; no EOS anywhere.
  Tokenizer plain = load_json(dir, j);
  EXPECT_EQ(plain.bos_id(), 1);
  EXPECT_EQ(plain.eos_id(), -1);
  EXPECT_EQ(plain.encode("a", true), (std::vector<std::int32_t>{1, 3}));
  // generation_config.json gives the EOS when the tokenizer config does not (first of a list).
  write_file(dir / "generation_config.json", R"({"eos_token_id": [2, 1]})");
  EXPECT_EQ(load_json(dir, j).eos_id(), 2);
  // LlamaTokenizerFast with add_eos_token: transformers rebuilds the template, BOS a EOS.
  write_file(dir / "tokenizer_config.json",
             R"({"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": true, "add_eos_token": true,
                 "bos_token": {"content": "<s>", "lstrip": false}, "eos_token": "</s>"})");
  Tokenizer llama = load_json(dir, j);
  EXPECT_EQ(llama.encode("a", true), (std::vector<std::int32_t>{1, 3, 2}));
  EXPECT_EQ(llama.encode("a", false), (std::vector<std::int32_t>{3}));
  EXPECT_EQ(llama.eos_id(), 2);
  write_file(dir / "tokenizer_config.json", R"({"tokenizer_class": "LlamaTokenizer", "add_bos_token": false})");
  EXPECT_EQ(load_json(dir, j).encode("a", true), (std::vector<std::int32_t>{3}));
  // Another class keeps tokenizer.json's template; bos_token null means no BOS.
  write_file(dir / "tokenizer_config.json", R"({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": null})");
  Tokenizer other = load_json(dir, j);
  EXPECT_EQ(other.bos_id(), -1);
  EXPECT_EQ(other.encode("a", true), (std::vector<std::int32_t>{1, 3}));
}

TEST(TokenizerJson, DecodeInvertsEncodeOnLosslessText) {
  const Tokenizer tok = qwen3();
  const std::vector<std::string> texts = {
      "Hello, world!  \n\n  x", "caf\xC3\xA9 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",
      "def f(x):\n    return x ** 2\n", "It's THEY'RE 12345", "\t\r\n \xC2\xA0", ""};
  for (const auto& t : texts) EXPECT_EQ(tok.decode(tok.encode(t, false)), t) << json(t).dump();
}

TEST(TokenizerJson, EncodesTheHeldOutSetWellUnderASecond) {
  const Tokenizer tok = qwen3();
  std::ifstream in(source_path("datasets/eval/heldout.jsonl"));
  std::vector<std::string> docs;
  std::size_t bytes = 0;
  for (std::string line; std::getline(in, line);) {
    docs.push_back(json::parse(line).at("text").get<std::string>());
    bytes += docs.back().size();
  }
  ASSERT_GT(bytes, 100000u);
  const std::clock_t cpu0 = std::clock();
  const auto wall0 = std::chrono::steady_clock::now();
  std::size_t tokens = 0;
  for (const auto& d : docs) tokens += tok.encode(d, true).size();
  const double cpu_s = static_cast<double>(std::clock() - cpu0) / CLOCKS_PER_SEC;
  const double wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  std::printf("[ encode ] %zu bytes -> %zu tokens: %.3f s CPU, %.3f s wall\n", bytes, tokens, cpu_s, wall_s);
  EXPECT_LT(cpu_s, 1.0);  // CPU time: the wall clock of a shared 2-core machine says little
}

RetrievalItem passkey_item() {
  RetrievalItem item;
  item.id = "passkey-test";
  item.line = 7;
  item.prompt = "The pass key is 52445. Remember it. What is the pass key? The pass key is";
  item.answer = "52445";
  return item;
}

TEST(TokenizerJson, RetrievalAnswerIdsAreThoseOfTheContinuation) {
  const Tokenizer tok = qwen3();
  const RetrievalItem item = passkey_item();
  const auto answer = retrieval_answer_ids(tok, item, "retrieval.jsonl:7");
  // Byte-level BPE: the space before the answer is its first token; the answer alone lacks it.
  const auto prompt = tok.encode(item.prompt, false);
  auto whole = prompt;
  whole.insert(whole.end(), answer.begin(), answer.end());
  EXPECT_EQ(whole, tok.encode(item.prompt + " " + item.answer, false));
  EXPECT_NE(answer, tok.encode(item.answer, false));
  EXPECT_EQ(tok.decode(answer), " 52445");
  // SentencePiece keeps encode(answer, false): its dummy prefix is the space.
  const Tokenizer sp = Tokenizer::load(source_path("datasets/tiny/tokenizer.model"));
  EXPECT_EQ(retrieval_answer_ids(sp, item, "retrieval.jsonl:7"), sp.encode(item.answer, false));
}

TEST(TokenizerJson, RetrievalAnswerWhoseContinuationChangesThePromptIsAnError) {
  // No pre-tokenizer and the whole "a b" in the vocabulary: the prompt's "a" is merged with the answer.
  TempDir dir;
  const Tokenizer tok = load_json(dir, piece_tokenizer({"a", "b", " ", "a b"}));
  RetrievalItem item = passkey_item();
  item.prompt = "a";
  item.answer = "b";
  expect_input_error([&] { (void)retrieval_answer_ids(tok, item, "retrieval.jsonl:7"); },
                     {"retrieval.jsonl:7", "answer", "passkey-test", "not a prefix"});
}

// ---- bad files ------------------------------------------------------------------------------

json valid_tokenizer() {
  json j = piece_tokenizer({"a", "b", "ab"});
  j["model"]["merges"] = json::array({"a b"});
  j["model"]["ignore_merges"] = false;
  return j;
}

void expect_refused(const std::string& text, const std::string& field, const std::string& what = "") {
  TempDir dir;
  const auto file = dir / "tokenizer.json";
  write_file(file, text);
  std::vector<std::string> needles = {file.string(), field};
  if (!what.empty()) needles.push_back(what);
  expect_input_error([&] { (void)Tokenizer::load(file); }, needles);
}

void expect_refused(const std::function<void(json&)>& edit, const std::string& field, const std::string& what = "") {
  json j = valid_tokenizer();
  edit(j);
  expect_refused(j.dump(), field, what);
}

TEST(TokenizerJson, ValidBaseLoads) {
  TempDir dir;
  const Tokenizer tok = load_json(dir, valid_tokenizer());
  EXPECT_EQ(tok.encode("ab", false), (std::vector<std::int32_t>{2}));
}

TEST(TokenizerJson, MalformedFilesAreInputErrors) {
  expect_refused("{\"model\": ", "tokenizer.json", "not valid JSON");
  expect_refused("[1, 2]", "tokenizer.json", "top level");
  expect_refused("{}", "model", "missing");
  expect_refused([](json& j) { j["model"] = 3; }, "model");
  TempDir dir;
  expect_input_error([&] { (void)Tokenizer::load(dir / "none.json"); }, {"none.json", "file not found"});
}

TEST(TokenizerJson, UnsupportedTypesAreRefusedByName) {
  expect_refused([](json& j) { j["model"]["type"] = "Unigram"; }, "model.type", "\"Unigram\" is not supported (kvcheck reads BPE)");
  expect_refused([](json& j) { j["model"]["type"] = "WordPiece"; }, "model.type", "WordPiece");
  expect_refused([](json& j) { j["normalizer"] = {{"type", "Lowercase"}}; }, "normalizer.type", "Lowercase");
  expect_refused([](json& j) { j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Strip"}}}}}; },
                 "normalizer.normalizers[1].type", "Strip");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "BertPreTokenizer"}}; }, "pre_tokenizer.type", "BertPreTokenizer");
  expect_refused([](json& j) { j["decoder"] = {{"type", "WordPiece"}}; }, "decoder.type", "WordPiece");
  expect_refused([](json& j) { j["post_processor"] = {{"type", "RobertaProcessing"}}; }, "post_processor.type", "RobertaProcessing");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}}; },
                 "pre_tokenizer.prepend_scheme", "sometimes");
  expect_refused([](json& j) { j["model"]["dropout"] = 0.1; }, "model.dropout");
  expect_refused([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, "model.continuing_subword_prefix");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Glob", "*"}}}, {"behavior", "Isolated"}}; },
                 "pre_tokenizer.pattern");
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Sideways"}}; },
                 "pre_tokenizer.behavior", "Sideways");
  expect_refused([](json& j) {
    json nested = {{"type", "NFC"}};
    for (int i = 0; i < 40; ++i) nested = {{"type", "Sequence"}, {"normalizers", {nested}}};
    j["normalizer"] = nested;
  }, "normalizer", "nested");
}

TEST(TokenizerJson, RegexThatDoesNotCompileIsRefused) {
  expect_refused([](json& j) { j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}}; },
                 "pre_tokenizer.pattern.Regex", "does not compile");
  expect_refused([](json& j) { j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"Regex", "[z-a]"}}}, {"content", ""}}; },
                 "normalizer.pattern.Regex", "does not compile");
}

TEST(TokenizerJson, VocabularyAndMergeErrorsNameTheEntry) {
  expect_refused([](json& j) { j["model"]["vocab"] = json::array(); }, "model.vocab");
  expect_refused([](json& j) { j["model"].erase("vocab"); }, "model.vocab", "missing");
  expect_refused([](json& j) { j["model"]["vocab"]["c"] = "7"; }, "model.vocab[\"c\"]", "integer");
  expect_refused([](json& j) { j["model"]["vocab"]["c"] = -1; }, "model.vocab[\"c\"]", "outside");
  expect_refused([](json& j) { j["model"]["vocab"]["c"] = 1; }, "model.vocab", "two tokens");
  // A huge vocabulary is refused by its ids, before anything of that size is allocated.
  expect_refused([](json& j) { j["model"]["vocab"]["c"] = 2000000000; }, "model.vocab[\"c\"]", "outside");
  expect_refused([](json& j) { j["model"].erase("merges"); }, "model.merges", "missing");
  expect_refused([](json& j) { j["model"]["merges"] = json::array({"a c"}); }, "model.merges[0]", "\"c\" is not in model.vocab");
  expect_refused([](json& j) { j["model"]["merges"] = json::array({"b a"}); }, "model.merges[0]", "\"ba\" is not in model.vocab");
  expect_refused([](json& j) { j["model"]["merges"] = json::array({"a b", "ab"}); }, "model.merges[1]");
  expect_refused([](json& j) { j["model"]["merges"] = json::array({json::array({"a", 2})}); }, "model.merges[0]");
  expect_refused([](json& j) { j["model"]["unk_token"] = "<unk>"; }, "model.unk_token", "not in model.vocab");
  expect_refused([](json& j) { j["model"]["byte_fallback"] = "yes"; }, "model.byte_fallback");
}

TEST(TokenizerJson, AddedTokenAndTemplateErrorsNameTheEntry) {
  expect_refused([](json& j) { j["added_tokens"] = {{{"id", -3}, {"content", "<x>"}}}; }, "added_tokens[0].id", "outside");
  expect_refused([](json& j) { j["added_tokens"] = {{{"id", 9}}}; }, "added_tokens[0].content");
  expect_refused([](json& j) { j["added_tokens"] = {{{"id", 5}, {"content", "<x>"}}, {{"id", 5}, {"content", "<y>"}}}; },
                 "added_tokens[1].id", "also given");
  expect_refused([](json& j) { j["added_tokens"] = {{{"id", 5}, {"content", "<x>"}, {"special", "yes"}}}; },
                 "added_tokens[0].special");
  expect_refused([](json& j) {
    j["post_processor"] = {{"type", "TemplateProcessing"},
                           {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                           {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {99}}}}}}};
  }, "post_processor.special_tokens[\"<s>\"].ids", "99");
  expect_refused([](json& j) {
    j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", {{{"SpecialToken", {{"id", "<s>"}}}}, {{"Sequence", {{"id", "A"}}}}}},
                           {"special_tokens", json::object()}};
  }, "post_processor.single[0]", "not in");
}

TEST(TokenizerJson, ConfigErrorsNameTheConfigFile) {
  TempDir dir;
  write_file(dir / "tokenizer.json", valid_tokenizer().dump());
  write_file(dir / "tokenizer_config.json", R"({"bos_token": "<nope>"})");
  expect_input_error([&] { (void)Tokenizer::load(dir / "tokenizer.json"); }, {"tokenizer_config.json", "bos_token", "<nope>"});
  write_file(dir / "tokenizer_config.json", R"({"eos_token": 5})");
  expect_input_error([&] { (void)Tokenizer::load(dir / "tokenizer.json"); }, {"tokenizer_config.json", "eos_token"});
  write_file(dir / "tokenizer_config.json", "{oops");
  expect_input_error([&] { (void)Tokenizer::load(dir / "tokenizer.json"); }, {"tokenizer_config.json", "not valid JSON"});
  write_file(dir / "tokenizer_config.json", "{}");
  write_file(dir / "generation_config.json", R"({"eos_token_id": 77})");
  expect_input_error([&] { (void)Tokenizer::load(dir / "tokenizer.json"); }, {"generation_config.json", "eos_token_id", "77"});
}

// generation_config.json's eos_token_id must be an id of the vocabulary [0, n): the last id is
// one, n (one past the end) is not.
TEST(TokenizerJson, GenerationEosIdIsAVocabularyId) {
  TempDir dir;
  write_file(dir / "tokenizer.json", valid_tokenizer().dump());
  const std::int32_t n = Tokenizer::load(dir / "tokenizer.json").vocab_size();
  ASSERT_GT(n, 0);
  write_file(dir / "generation_config.json", fmt::format(R"({{"eos_token_id": {}}})", n - 1));
  EXPECT_EQ(Tokenizer::load(dir / "tokenizer.json").eos_id(), n - 1);
  write_file(dir / "generation_config.json", fmt::format(R"({{"eos_token_id": [{}, 0]}})", n));
  expect_input_error([&] { (void)Tokenizer::load(dir / "tokenizer.json"); },
                     {"generation_config.json", "eos_token_id", std::to_string(n)});
}

}  // namespace
}  // namespace kvcheck
