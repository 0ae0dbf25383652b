// SentencePiece tokenizer.model behind reference/tokenizer.h.
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <sentencepiece_processor.h>

#include "reference/errors.h"
#include "reference/tokenizer_backend.h"

namespace kvcheck {
namespace {

class SentencePieceBackend final : public TokenizerBackend {
 public:
  explicit SentencePieceBackend(const std::filesystem::path& file) : origin_(file.string()) {
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) throw input_error(origin_, "tokenizer.model", "file not found");
    if (std::filesystem::is_directory(file, ec)) {
      throw input_error(origin_, "tokenizer.model", "is a directory, not a SentencePiece model file");
    }
    const auto status = processor_.Load(origin_);
    if (!status.ok()) {
      throw input_error(origin_, "tokenizer.model", "not a valid SentencePiece model: {}", status.ToString());
    }
    const int pieces = processor_.GetPieceSize();
    if (pieces <= 0) throw input_error(origin_, "tokenizer.model", "the model has no pieces");
    vocab_size_ = static_cast<std::int32_t>(pieces);
  }

  std::vector<std::int32_t> encode(std::string_view text, bool add_bos) const override {
    std::vector<int> pieces;
    const auto status = processor_.Encode(text, &pieces);
    if (!status.ok()) {
      throw input_error(origin_, "tokenizer.model", "SentencePiece encode failed: {}", status.ToString());
    }
    std::vector<std::int32_t> ids;
    ids.reserve(pieces.size() + 1);
    if (add_bos && bos_id() >= 0) ids.push_back(bos_id());
    for (int id : pieces) ids.push_back(static_cast<std::int32_t>(id));
    return ids;
  }

  std::string decode(std::span<const std::int32_t> ids) const override {
    const std::vector<int> pieces(ids.begin(), ids.end());
    std::string text;
    const auto status = processor_.Decode(pieces, &text);
    if (!status.ok()) {
      throw input_error(origin_, "tokenizer.model", "SentencePiece decode failed: {}", status.ToString());
    }
    return text;
  }

  std::int32_t bos_id() const override { return static_cast<std::int32_t>(processor_.bos_id()); }
  std::int32_t eos_id() const override { return static_cast<std::int32_t>(processor_.eos_id()); }
  std::int32_t vocab_size() const override { return vocab_size_; }
  std::string_view format() const override { return "sentencepiece"; }

 private:
  std::string origin_;
  sentencepiece::SentencePieceProcessor processor_;
  std::int32_t vocab_size_ = 0;
};

}  // namespace

std::unique_ptr<TokenizerBackend> load_sentencepiece_backend(const std::filesystem::path& file) {
  return std::make_unique<SentencePieceBackend>(file);
}

}  // namespace kvcheck
