// Hugging Face tokenizer.json behind reference/tokenizer.h (not yet implemented: issue 26).
#include "reference/errors.h"
#include "reference/tokenizer_backend.h"

namespace kvcheck {

std::unique_ptr<TokenizerBackend> load_tokenizer_json_backend(const std::filesystem::path& file) {
  throw input_error(file.string(), "tokenizer.json", "tokenizer.json is not read yet; use tokenizer.model");
}

}  // namespace kvcheck
