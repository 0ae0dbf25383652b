// SentencePiece tokenizer wrapper (reference/tokenizer.h) on datasets/tiny/tokenizer.model.
#include "reference/tokenizer.h"

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "properties/support/test_support.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;

using testing::source_path;
using testing::TempDir;
using testing::write_file;

Tokenizer tiny() { return Tokenizer::load(source_path("datasets/tiny/tokenizer.model")); }

void expect_ids_in_range(const Tokenizer& tok, const std::vector<std::int32_t>& ids) {
  for (std::size_t i = 0; i < ids.size(); ++i) {
    EXPECT_GE(ids[i], 0) << "index " << i;
    EXPECT_LT(ids[i], tok.vocab_size()) << "index " << i;
  }
}

TEST(TokenizerTest, LoadsTinyModel) {
  const Tokenizer tok = tiny();
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.path(), source_path("datasets/tiny/tokenizer.model"));
}

TEST(TokenizerTest, EncodeAddsBosOnlyWhenAsked) {
  const Tokenizer tok = tiny();
  const std::string text = "The train was late again.";
  const auto plain = tok.encode(text, false);
  const auto with_bos = tok.encode(text, true);
  ASSERT_FALSE(plain.empty());
  EXPECT_NE(plain.front(), tok.bos_id());
  ASSERT_EQ(with_bos.size(), plain.size() + 1);
  EXPECT_EQ(with_bos.front(), tok.bos_id());
  EXPECT_EQ(std::vector<std::int32_t>(with_bos.begin() + 1, with_bos.end()), plain);
  for (std::int32_t id : plain) EXPECT_NE(id, tok.bos_id());

  EXPECT_TRUE(tok.encode("", false).empty());
  EXPECT_EQ(tok.encode("", true), std::vector<std::int32_t>{tok.bos_id()});
}

TEST(TokenizerTest, RoundTripsAsciiSentences) {
  const Tokenizer tok = tiny();
  for (const std::string text :
       {"The cache sat between the slow memory and the eager processor.",
        "Hello, world!", "a", "Numbers 12345 and symbols #@%&*() [x] {y}.",
        "Zebras quickly jumped over vexing fjords; nobody was surprised.",
        "Two  spaces,\ttabs and\nnewlines stay put.", "MiXeD CaSe WoRdS"}) {
    SCOPED_TRACE(text);
    const auto ids = tok.encode(text, false);
    expect_ids_in_range(tok, ids);
    EXPECT_EQ(tok.decode(ids), text);
    EXPECT_EQ(tok.decode(tok.encode(text, true)), text);  // BOS produces no text
  }
}

TEST(TokenizerTest, RoundTripsUnicodeThroughByteFallback) {
  const Tokenizer tok = tiny();
  for (const std::string text : {"caf\xc3\xa9 na\xc3\xafve", "snow \xe2\x98\x83 and \xf0\x9f\x99\x82",
                                 "\xe6\x97\xa5\xe6\x9c\xac \xce\x95\xce\xbb\xce\xbb\xce\xac\xce\xb4\xce\xb1"}) {
    SCOPED_TRACE(text);
    const auto ids = tok.encode(text, false);
    expect_ids_in_range(tok, ids);
    for (std::int32_t id : ids) EXPECT_NE(id, 0) << "unk piece despite byte fallback";
    EXPECT_EQ(tok.decode(ids), text);
  }
}

TEST(TokenizerTest, ArbitraryBytesNeverThrow) {
  const Tokenizer tok = tiny();
  std::string all_bytes;
  for (int b = 0; b < 256; ++b) all_bytes.push_back(static_cast<char>(b));
  const std::vector<std::string> inputs = {
      std::string("a\0b", 3),        std::string(1, '\0'),      "\xff\xfe\xfd",
      "\xc3",                        "ok \x80\x81 then \xed\xa0\x80", all_bytes,
      std::string(2000, '\x9c'),
  };
  for (const auto& text : inputs) {
    std::vector<std::int32_t> ids;
    ASSERT_NO_THROW(ids = tok.encode(text, true));
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids.front(), tok.bos_id());
    expect_ids_in_range(tok, ids);
    EXPECT_NO_THROW((void)tok.decode(ids));
  }
}

TEST(TokenizerTest, DecodeSkipsControlPieces) {
  const Tokenizer tok = tiny();
  auto ids = tok.encode("Soup tastes better tomorrow.", true);
  ids.push_back(tok.eos_id());
  EXPECT_EQ(tok.decode(ids), "Soup tastes better tomorrow.");
  EXPECT_EQ(tok.decode(std::vector<std::int32_t>{}), "");
}

TEST(TokenizerTest, DecodeRejectsOutOfRangeId) {
  const Tokenizer tok = tiny();
  const auto file = source_path("datasets/tiny/tokenizer.model").string();
  expect_input_error([&] { (void)tok.decode(std::vector<std::int32_t>{5, 6, 512}); },
                     {"512", "index 2", file});
  expect_input_error([&] { (void)tok.decode(std::vector<std::int32_t>{-1}); }, {"-1", "index 0"});
  expect_input_error([&] { (void)tok.decode(std::vector<std::int32_t>{3, 1000000}); },
                     {"1000000", "index 1"});
}

TEST(TokenizerTest, MoveKeepsTheModel) {
  Tokenizer a = tiny();
  const auto ids = a.encode("moving along", true);
  Tokenizer b = std::move(a);
  EXPECT_EQ(b.encode("moving along", true), ids);
  Tokenizer c = tiny();
  c = std::move(b);
  EXPECT_EQ(c.decode(ids), "moving along");
}

TEST(TokenizerTest, MissingFile) {
  TempDir dir;
  const auto file = dir / "tokenizer.model";
  expect_input_error([&] { (void)Tokenizer::load(file); }, {file.string(), "tokenizer.model"});
}

TEST(TokenizerTest, GarbageFile) {
  TempDir dir;
  const auto file = dir / "tokenizer.model";
  write_file(file, "this is not a sentencepiece model \x01\x02\x03\xff");
  expect_input_error([&] { (void)Tokenizer::load(file); }, {file.string(), "tokenizer.model"});
  const auto empty = dir / "empty.model";
  write_file(empty, "");
  expect_input_error([&] { (void)Tokenizer::load(empty); }, {empty.string()});
}

TEST(TokenizerTest, DirectoryIsNotAModel) {
  TempDir dir;
  expect_input_error([&] { (void)Tokenizer::load(dir.path()); }, {dir.path().string()});
}

}  // namespace
}  // namespace kvcheck
