#include "reference/tokenizer.h"

#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include "reference/errors.h"

namespace kvcheck {

struct Tokenizer::Impl {
  std::filesystem::path path;
  sentencepiece::SentencePieceProcessor processor;
  std::int32_t vocab_size = 0;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::filesystem::path& model_file) {
  const std::string origin = model_file.string();
  std::error_code ec;
  if (!std::filesystem::exists(model_file, ec)) {
    throw input_error(origin, "tokenizer.model", "file not found");
  }
  if (std::filesystem::is_directory(model_file, ec)) {
    throw input_error(origin, "tokenizer.model", "is a directory, not a SentencePiece model file");
  }
  auto impl = std::make_unique<Impl>();
  impl->path = model_file;
  const auto status = impl->processor.Load(origin);
  if (!status.ok()) {
    throw input_error(origin, "tokenizer.model", "not a valid SentencePiece model: {}",
                      status.ToString());
  }
  const int pieces = impl->processor.GetPieceSize();
  if (pieces <= 0) throw input_error(origin, "tokenizer.model", "the model has no pieces");
  impl->vocab_size = static_cast<std::int32_t>(pieces);
  return Tokenizer(std::move(impl));
}

std::vector<std::int32_t> Tokenizer::encode(std::string_view text, bool add_bos) const {
  std::vector<int> pieces;
  const auto status = impl_->processor.Encode(text, &pieces);
  if (!status.ok()) {
    throw input_error(impl_->path.string(), "tokenizer.model", "SentencePiece encode failed: {}",
                      status.ToString());
  }
  std::vector<std::int32_t> ids;
  ids.reserve(pieces.size() + 1);
  if (add_bos && bos_id() >= 0) ids.push_back(bos_id());
  for (int id : pieces) ids.push_back(static_cast<std::int32_t>(id));
  return ids;
}

std::string Tokenizer::decode(std::span<const std::int32_t> ids) const {
  std::vector<int> pieces;
  pieces.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= impl_->vocab_size) {
      throw input_error(impl_->path.string(), fmt::format("token ids[{}]", i),
                        "token id {} at index {} is outside the vocabulary [0, {})", ids[i], i,
                        impl_->vocab_size);
    }
    pieces.push_back(static_cast<int>(ids[i]));
  }
  std::string text;
  const auto status = impl_->processor.Decode(pieces, &text);
  if (!status.ok()) {
    throw input_error(impl_->path.string(), "tokenizer.model", "SentencePiece decode failed: {}",
                      status.ToString());
  }
  return text;
}

std::int32_t Tokenizer::bos_id() const {
  return static_cast<std::int32_t>(impl_->processor.bos_id());
}
std::int32_t Tokenizer::eos_id() const {
  return static_cast<std::int32_t>(impl_->processor.eos_id());
}
std::int32_t Tokenizer::vocab_size() const { return impl_->vocab_size; }
const std::filesystem::path& Tokenizer::path() const { return impl_->path; }

}  // namespace kvcheck
