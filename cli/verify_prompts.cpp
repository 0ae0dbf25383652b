#include "cli/verify_prompts.h"

#include <random>

#include <fmt/format.h>

#include "cli/eval_files.h"
#include "oracles/eval_data.h"
#include "reference/errors.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

std::vector<Prompt> make_prompts(const VerifyArgs& args, const std::filesystem::path& dir, const ModelConfig& c,
                                 std::string& origin, std::filesystem::path* text_file) {
  const std::optional<Tokenizer> tokenizer = Tokenizer::find(dir);
  return make_prompts(args, dir, c, tokenizer ? &*tokenizer : nullptr, origin, text_file);
}

std::vector<Prompt> make_prompts(const VerifyArgs& args, const std::filesystem::path& dir, const ModelConfig& c,
                                 const Tokenizer* tokenizer_found, std::string& origin,
                                 std::filesystem::path* text_file) {
  const std::int64_t want = args.prompt_tokens + (args.feed == "text" ? args.max_new_tokens : 0);
  if (want > c.max_position_embeddings) {
    throw input_error("--prompt-tokens", "value", "{} prompt tokens{} exceed max_position_embeddings {} of the model",
                      args.prompt_tokens, args.feed == "text" ? " plus the fed text" : "", c.max_position_embeddings);
  }
  std::vector<Prompt> prompts;
  if (tokenizer_found != nullptr) {
    const Tokenizer& tokenizer = *tokenizer_found;
    const std::filesystem::path heldout = heldout_path(args.heldout_file);
    origin = heldout.string();
    if (text_file != nullptr) *text_file = heldout;
    std::vector<std::vector<std::int32_t>> docs;
    std::vector<std::string> ids;
    for (const HeldoutDocument& d : load_heldout(heldout)) {
      docs.push_back(tokenizer.encode(d.text, true));
      ids.push_back(d.id);
    }
    // Round-robin over the documents, window after window, so prompts come from every document.
    for (std::int64_t window = 0; static_cast<std::int64_t>(prompts.size()) < args.prompts; ++window) {
      bool any = false;
      for (std::size_t d = 0; d < docs.size() && static_cast<std::int64_t>(prompts.size()) < args.prompts; ++d) {
        const std::int64_t start = window * want;
        if (start + want > static_cast<std::int64_t>(docs[d].size())) continue;
        any = true;
        std::vector<std::int32_t> t(docs[d].begin() + start, docs[d].begin() + start + want);
        if (start > 0 && tokenizer.bos_id() >= 0) t[0] = tokenizer.bos_id();  // every prompt starts with <s>
        prompts.push_back({fmt::format("heldout {} @ token {}", ids[d], start), std::move(t)});
      }
      if (!any) {
        throw input_error(heldout.string(), "documents", "hold only {} windows of {} tokens; ask for fewer --prompts",
                          prompts.size(), want);
      }
    }
  } else {
    if (!args.heldout_file.empty()) {
      throw input_error("--heldout", args.heldout_file, "needs the model's tokenizer (tokenizer.json or tokenizer.model); {} has none",
                        dir.string());
    }
    origin = fmt::format("random ids, seed {} (no tokenizer.json or tokenizer.model in {})", args.seed, dir.string());
    std::mt19937_64 rng(args.seed);
    std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(c.vocab_size - 1));
    for (std::int64_t p = 0; p < args.prompts; ++p) {
      Prompt pr{"random", {}};
      for (std::int64_t t = 0; t < want; ++t) pr.tokens.push_back(id(rng));
      prompts.push_back(std::move(pr));
    }
  }
  return prompts;
}

std::vector<Prompt> calibration_windows(const VerifyArgs& args, const std::filesystem::path& dir, const ModelConfig& c,
                                        std::int64_t count) {
  VerifyArgs sample_args = args;
  sample_args.feed = "text";
  sample_args.prompts = args.prompts + count;
  std::string origin;
  std::vector<Prompt> windows = make_prompts(sample_args, dir, c, origin);
  windows.erase(windows.begin(), windows.begin() + args.prompts);
  return windows;
}

}  // namespace kvcheck::cli
