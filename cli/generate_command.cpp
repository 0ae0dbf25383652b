// kvcheck generate: greedy generation with the reference model, or with the optimized engine
// (--engine optimized: same stop rules, same logits rows for --dump-logits).
#include <algorithm>
#include <charconv>
#include <filesystem>
#include <optional>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "optimized/engine.h"
#include "reference/errors.h"
#include "reference/generate.h"
#include "reference/model.h"
#include "reference/npy.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

void add_generate(CLI::App& app, GenerateArgs& args) {
  CLI::App* cmd = app.add_subcommand("generate", "Greedy generation with the reference transformer or the optimized engine");
  cmd->add_option("--model", args.model,
                  "Model directory (config.json, model.safetensors, tokenizer.model); default: the embedded model "
                  "<datasets>/models/kvcheck-tiny");
  auto* prompt = cmd->add_option("--prompt", args.prompt, "Prompt text (needs DIR/tokenizer.model)");
  auto* ids = cmd->add_option("--ids", args.ids, "Prompt token ids, comma-separated");
  prompt->excludes(ids);
  ids->excludes(prompt);
  cmd->add_option("--max-new-tokens", args.max_new_tokens, "Tokens to generate")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--dump-logits", args.dump_logits,
                  "Write the logits of every prompt and generated position as a float32 .npy [positions, vocab]");
  cmd->add_option("--decode-path", args.decode_path, "cache: contiguous KV cache; recompute: full recompute per step")
      ->capture_default_str()
      ->check(CLI::IsMember({"cache", "recompute"}));
  cmd->add_flag("--no-bos", args.no_bos, "Do not prepend BOS to --prompt");
  cmd->add_flag("--ignore-eos", args.ignore_eos, "Keep generating after EOS");
  cmd->add_option("--engine", args.engine, "reference: the exact double-precision oracle; optimized: the paged engine")
      ->capture_default_str()
      ->check(CLI::IsMember({"reference", "optimized"}));
  cmd->add_option("--device", args.device, "Optimized engine backend: cpu or cuda")->capture_default_str();
  cmd->add_option("--policy", args.policy, "Optimized engine KV policy (see kvcheck verify --help)")->capture_default_str();
  cmd->add_option("--kv-pages", args.kv_pages, "Optimized engine: pages in the KV pool (0: automatic)")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--page-bytes", args.page_bytes, "Optimized engine: bytes per KV page")->capture_default_str();
  cmd->add_option("--threads", args.threads, "Optimized engine: CPU threads (0: every core)")->capture_default_str();
}

std::vector<std::int64_t> parse_token_ids(const std::string& text) {
  std::vector<std::int64_t> ids;
  if (text.find_first_not_of(" \t") == std::string::npos) return ids;
  std::size_t start = 0;
  for (std::size_t index = 0;; ++index) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    std::int64_t value = 0;
    const std::size_t first = item.find_first_not_of(' ');
    const std::size_t last = item.find_last_not_of(' ');
    const char* begin = first == std::string::npos ? item.data() : item.data() + first;
    const char* end = first == std::string::npos ? item.data() : item.data() + last + 1;
    const auto [ptr, ec] = std::from_chars(begin, end, value);
    if (begin == end || ec != std::errc() || ptr != end) {
      throw input_error("--ids", fmt::format("index {}", index), "'{}' is not an integer token id", item);
    }
    ids.push_back(value);
    if (comma == text.size()) break;
    start = comma + 1;
  }
  return ids;
}

int run_generate(const GenerateArgs& args) {
  const std::filesystem::path dir =
      args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  const std::vector<std::int64_t> ids = parse_token_ids(args.ids);
  if (args.prompt.empty() && ids.empty()) {
    throw input_error("request", "prompt", "empty prompt: give --prompt TEXT or --ids 1,2,3");
  }
  const ReferenceModel model = ReferenceModel::load(dir);
  const std::optional<Tokenizer> tokenizer = Tokenizer::find(dir);

  std::vector<std::int32_t> prompt;
  if (!args.prompt.empty()) {
    if (!tokenizer) {
      throw input_error(dir.string(), "tokenizer", "--prompt needs a tokenizer (tokenizer.json or tokenizer.model); use --ids");
    }
    prompt = tokenizer->encode(args.prompt, !args.no_bos);
  } else {
    for (std::size_t i = 0; i < ids.size(); ++i) {
      const std::int64_t id = ids[i];
      if (id < 0 || id >= model.config().vocab_size) {
        throw input_error("--ids", fmt::format("index {}", i), "token id {} is outside the vocabulary [0, {}) of {}", id,
                          model.config().vocab_size, model.origin());
      }
      prompt.push_back(static_cast<std::int32_t>(id));
    }
  }

  // A policy asked of the reference engine would be silently ignored: it keeps every token exactly.
  if (args.engine != "optimized" && args.policy != "full-fp32") {
    throw input_error("--policy", args.policy, "applies to --engine optimized; the reference engine keeps the exact cache");
  }
  GenerateResult result;
  if (args.engine == "optimized") {
    if (args.decode_path != "cache") throw input_error("--decode-path", "value", "only the reference has a recompute path");
    std::unique_ptr<Engine> engine = make_engine(model, single_request_engine_options(args, args.policy));
    EngineGenerateOptions go;
    go.max_new_tokens = args.max_new_tokens;
    go.stop_at_eos = !args.ignore_eos;
    go.keep_logits = !args.dump_logits.empty();
    EngineGenerateResult er = engine_generate(*engine, 0, prompt, go);
    result.generated = er.generated;
    result.stop_reason = er.stop_reason;
    if (go.keep_logits) {
      const Eigen::Index v = model.config().vocab_size;
      result.logits = Eigen::Map<const MatrixRM>(er.logits.data(), static_cast<Eigen::Index>(er.logits.size()) / v, v);
    }
    fmt::print("engine: optimized, device {}, policy {}\n", args.device, args.policy);
  } else {
    GenerateOptions options;
    options.max_new_tokens = args.max_new_tokens;
    options.path = args.decode_path == "recompute" ? DecodePath::kFullRecompute : DecodePath::kKVCache;
    options.stop_at_eos = !args.ignore_eos;
    options.keep_logits = !args.dump_logits.empty();
    result = generate_greedy(model, prompt, options);
  }

  fmt::print("prompt ids: {}\n", fmt::join(prompt, " "));
  fmt::print("generated ids: {}\n", fmt::join(result.generated, " "));
  if (tokenizer) {
    fmt::print("prompt text: {}\n", tokenizer->decode(prompt));
    fmt::print("generated text: {}\n", tokenizer->decode(result.generated));
  }
  fmt::print("stop: {}\n", result.stop_reason);
  if (!args.dump_logits.empty()) {
    write_npy_f32(args.dump_logits, result.logits.rows(), result.logits.cols(),
                  std::span<const float>(result.logits.data(), static_cast<std::size_t>(result.logits.size())));
    fmt::print("logits: {} [{}, {}] float32\n", args.dump_logits, result.logits.rows(), result.logits.cols());
  }
  return 0;
}

}  // namespace kvcheck::cli
