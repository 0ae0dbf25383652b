// SentencePiece tokenizer (tokenizer.model) with BOS/EOS handling.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvcheck {

class Tokenizer {
 public:
  // Loads a SentencePiece model file. InputError naming the file when it is missing or invalid.
  static Tokenizer load(const std::filesystem::path& model_file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids for `text`, with bos_id() first when add_bos is true and the model has a BOS piece.
  // Any byte string is accepted (invalid UTF-8 included); it never throws for content.
  std::vector<std::int32_t> encode(std::string_view text, bool add_bos) const;
  // Text for `ids`; BOS/EOS and other control pieces produce no text.
  // InputError when an id is outside [0, vocab_size()).
  std::string decode(std::span<const std::int32_t> ids) const;

  std::int32_t bos_id() const;  // -1 when the model has none
  std::int32_t eos_id() const;  // -1 when the model has none
  std::int32_t vocab_size() const;
  const std::filesystem::path& path() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvcheck
