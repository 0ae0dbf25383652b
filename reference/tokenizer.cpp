#include "reference/tokenizer.h"

#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "reference/errors.h"
#include "reference/gguf.h"
#include "reference/gguf_model.h"
#include "reference/tokenizer_backend.h"

namespace kvcheck {

Tokenizer::Tokenizer(std::filesystem::path path, std::unique_ptr<TokenizerBackend> backend)
    : path_(std::move(path)), backend_(std::move(backend)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

namespace {

std::unique_ptr<TokenizerBackend> gguf_backend(const GgufFile& file) {
  GgufTokenizer tok = gguf_tokenizer(file);
  return make_tokenizer_json_backend(tok.tokenizer_json, file.path().string(), tok.bos_id, tok.eos_id, "gguf");
}

}  // namespace

Tokenizer Tokenizer::load(const std::filesystem::path& file) {
  if (is_gguf_file(file)) return Tokenizer(file, gguf_backend(GgufFile::open(file)));
  if (file.extension() == ".json") return Tokenizer(file, load_tokenizer_json_backend(file));
  return Tokenizer(file, load_sentencepiece_backend(file));
}

std::optional<std::filesystem::path> Tokenizer::find_file(const std::filesystem::path& model_dir) {
  if (model_dir.empty()) return std::nullopt;
  if (is_gguf_file(model_dir)) {
    // A GGUF file is its own tokenizer when it carries one.
    if (GgufFile::open(model_dir).find("tokenizer.ggml.model") == nullptr) return std::nullopt;
    return model_dir;
  }
  std::error_code ec;
  for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
    const std::filesystem::path file = model_dir / name;
    if (std::filesystem::exists(file, ec)) return file;
  }
  return std::nullopt;
}

std::optional<Tokenizer> Tokenizer::find(const std::filesystem::path& model_dir) {
  if (!model_dir.empty() && is_gguf_file(model_dir)) {  // one parse of the file, not find_file's and load's
    const GgufFile file = GgufFile::open(model_dir);
    if (file.find("tokenizer.ggml.model") == nullptr) return std::nullopt;
    return Tokenizer(model_dir, gguf_backend(file));
  }
  const auto file = find_file(model_dir);
  if (!file) return std::nullopt;
  return load(*file);
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  return backend_->encode(text, add_bos);
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  const std::int32_t vocab = backend_->vocab_size();
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw input_error(path_.string(), fmt::format("token ids[{}]", i),
                        "token id {} at index {} is outside the vocabulary [0, {})", ids[i], i, vocab);
    }
  }
  return backend_->decode(ids);
}

std::int32_t Tokenizer::bos_id() const { return backend_->bos_id(); }
std::int32_t Tokenizer::eos_id() const { return backend_->eos_id(); }
std::int32_t Tokenizer::vocab_size() const { return backend_->vocab_size(); }
const std::filesystem::path& Tokenizer::path() const { return path_; }
std::string_view Tokenizer::format() const { return backend_->format(); }

}  // namespace kvcheck
