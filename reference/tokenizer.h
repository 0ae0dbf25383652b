// A model's tokenizer: SentencePiece (tokenizer.model) or Hugging Face tokenizer.json, one
// interface for both, with BOS/EOS handling. Tokenizer::find is the one place that decides
// which file of a model directory is its tokenizer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvcheck {

class TokenizerBackend;

class Tokenizer {
 public:
  // Loads a tokenizer file: a GGUF model's tokenizer.ggml.* keys (any file starting with the GGUF
  // magic), a tokenizer.json (any file named *.json) or a SentencePiece model.
  // InputError naming the file when it is missing or invalid.
  static Tokenizer load(const std::filesystem::path& file);
  // The tokenizer of a model directory: DIR/tokenizer.json when present (what transformers'
  // AutoTokenizer loads by default), else DIR/tokenizer.model, else nullopt. For a GGUF file,
  // the file itself when it has tokenizer.ggml.* keys.
  static std::optional<Tokenizer> find(const std::filesystem::path& model_dir);
  // The file find() would load, or nullopt.
  static std::optional<std::filesystem::path> find_file(const std::filesystem::path& model_dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids for `text`; with add_bos, the special tokens the model's tokenizer adds by default
  // (BOS first for SentencePiece models that have one and for Llama-style tokenizer.json; nothing
  // for Qwen). Any byte string is accepted (invalid UTF-8 included); it never throws for content.
  std::vector<std::int32_t> encode(std::string_view text, bool add_bos) const;
  // Text for `ids`; BOS/EOS and other special tokens produce no text.
  // InputError when an id is outside [0, vocab_size()).
  std::string decode(std::span<const std::int32_t> ids) const;

  std::int32_t bos_id() const;  // -1 when the model has none
  std::int32_t eos_id() const;  // -1 when the model has none
  std::int32_t vocab_size() const;
  const std::filesystem::path& path() const;
  std::string_view format() const;  // "sentencepiece", "tokenizer.json" or "gguf"

 private:
  Tokenizer(std::filesystem::path path, std::unique_ptr<TokenizerBackend> backend);
  std::filesystem::path path_;
  std::unique_ptr<TokenizerBackend> backend_;
};

}  // namespace kvcheck
