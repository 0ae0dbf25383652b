// What a tokenizer format implements behind reference/tokenizer.h: SentencePiece
// (tokenizer.model, reference/sentencepiece_tokenizer.cpp) and Hugging Face tokenizer.json
// (reference/tokenizer_json.cpp). Errors are InputErrors naming the file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvcheck {

class TokenizerBackend {
 public:
  virtual ~TokenizerBackend() = default;
  // Ids for `text`. add_bos: the special tokens the model's own tokenizer adds by default
  // (transformers' add_special_tokens=True: BOS for Llama and Mistral, nothing for Qwen).
  // Any byte string is accepted; invalid UTF-8 never throws.
  virtual std::vector<std::int32_t> encode(std::string_view text, bool add_bos) const = 0;
  // Text for `ids` with special tokens skipped; ids were range-checked by the caller.
  virtual std::string decode(std::span<const std::int32_t> ids) const = 0;
  virtual std::int32_t bos_id() const = 0;  // -1: none
  virtual std::int32_t eos_id() const = 0;  // -1: none
  virtual std::int32_t vocab_size() const = 0;
  // "sentencepiece", "tokenizer.json" or "gguf"
  virtual std::string_view format() const = 0;
};

std::unique_ptr<TokenizerBackend> load_sentencepiece_backend(const std::filesystem::path& file);
// `file` is a tokenizer.json; tokenizer_config.json and generation_config.json are read from
// the same directory when present.
std::unique_ptr<TokenizerBackend> load_tokenizer_json_backend(const std::filesystem::path& file);
// A tokenizer.json held in memory (reference/gguf_model.cpp builds one from a GGUF file's
// metadata); `origin` names it in errors, bos_id / eos_id are -1 when the model has none, and
// format() returns `format`.
std::unique_ptr<TokenizerBackend> make_tokenizer_json_backend(const nlohmann::json& root, const std::string& origin,
                                                              std::int32_t bos_id, std::int32_t eos_id,
                                                              const std::string& format);

}  // namespace kvcheck
