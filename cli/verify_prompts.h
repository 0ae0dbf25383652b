// The prompts of kvcheck verify (and its sweep and the report): windows cut from the held-out
// documents (--heldout FILE, default <datasets>/eval/heldout.jsonl) with the model's tokenizer,
// or seeded random ids for a model without one.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "reference/config.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

struct Prompt {
  std::string source;                 // "heldout <id> @ token N" or "random"
  std::vector<std::int32_t> tokens;   // prompt + continuation (text feed), or the prompt only
};

// args.prompts prompts of args.prompt_tokens tokens (plus args.max_new_tokens of continuation
// with --feed text); `origin` receives where they came from, and `text_file` (when given) the
// held-out file they were cut from (left empty for random ids). InputError when they do not fit
// the model or the held-out set, or when args.heldout names a file but the model has no tokenizer.
std::vector<Prompt> make_prompts(const VerifyArgs& args, const std::filesystem::path& dir, const ModelConfig& c,
                                 std::string& origin, std::filesystem::path* text_file = nullptr);
// The same with the model's tokenizer already loaded (`tokenizer`: Tokenizer::find(dir), null when
// the model has none), for a caller that needs it again and should not read the file twice.
std::vector<Prompt> make_prompts(const VerifyArgs& args, const std::filesystem::path& dir, const ModelConfig& c,
                                 const Tokenizer* tokenizer, std::string& origin,
                                 std::filesystem::path* text_file = nullptr);

// `count` held-out text windows (prompt + continuation, as --feed text cuts them) taken right
// after the args.prompts windows the evaluation itself uses, so a calibration (fp8 scales, xkv
// budgets) never sees the windows it is then measured on.
std::vector<Prompt> calibration_windows(const VerifyArgs& args, const std::filesystem::path& dir, const ModelConfig& c,
                                        std::int64_t count);

}  // namespace kvcheck::cli
