// kvcheck generate: greedy generation with the reference model, or with the optimized engine
// (--engine optimized: same stop rules, same logits rows for --dump-logits). With --feed-ids FILE
// the ids after the prompt are FILE's, teacher-forced one decode step at a time instead of the
// argmax, so both engines (and any policy) give logits rows for exactly the same sequence.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/commands.h"
#include "cli/engine_options.h"
#include "cli/output_file.h"
#include "optimized/engine.h"
#include "reference/chat_template.h"
#include "reference/errors.h"
#include "reference/generate.h"
#include "reference/model.h"
#include "reference/npy.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

void add_generate(CLI::App& app, GenerateArgs& args) {
  CLI::App* cmd = app.add_subcommand("generate", "Greedy generation with the reference transformer or the optimized engine");
  cmd->add_option("--model", args.model,
                  "Model directory (config.json, model.safetensors, optional tokenizer) or GGUF file; default: the embedded model "
                  "<datasets>/models/kvcheck-tiny");
  auto* prompt = cmd->add_option("--prompt", args.prompt, "Prompt text (needs the model's tokenizer: DIR/tokenizer.json or DIR/tokenizer.model)");
  auto* ids = cmd->add_option("--ids", args.ids, "Prompt token ids, comma-separated");
  auto* chat = cmd->add_option("--chat", args.chat,
                               "One user message, rendered with the model's chat template (a GGUF file's "
                               "tokenizer.chat_template or DIR/tokenizer_config.json's; ChatML templates) and "
                               "tokenized without an added BOS");
  prompt->excludes(ids);
  ids->excludes(prompt);
  chat->excludes(prompt);
  chat->excludes(ids);
  auto* max_new = cmd->add_option("--max-new-tokens", args.max_new_tokens, "Tokens to generate")
                      ->capture_default_str()
                      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--feed-ids", args.feed_ids,
                  "Teacher-force these ids after the prompt, one decode step each, instead of the argmax: a text file "
                  "of token ids separated by commas and/or whitespace (every id is fed; EOS does not stop it)")
      ->excludes(max_new);
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
  cmd->add_option("--device", args.device, "Optimized engine backend: cpu, cuda or cuda-resident")->capture_default_str();
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

std::vector<std::int64_t> read_feed_ids(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw input_error(file.string(), "--feed-ids", "cannot be read");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const auto is_space = [](char ch) { return std::isspace(static_cast<unsigned char>(ch)) != 0; };
  std::vector<std::int64_t> ids;
  bool after_comma = true;  // a comma here ends an empty item (a leading comma, or ",,")
  for (std::size_t at = 0; at < text.size();) {
    if (is_space(text[at])) {
      ++at;
    } else if (text[at] == ',') {
      if (after_comma) throw input_error(file.string(), fmt::format("index {}", ids.size()), "empty item before a comma");
      after_comma = true;
      ++at;
    } else {
      std::size_t end = at;
      while (end < text.size() && text[end] != ',' && !is_space(text[end])) ++end;
      std::int64_t value = 0;
      const auto [ptr, ec] = std::from_chars(text.data() + at, text.data() + end, value);
      if (ec != std::errc() || ptr != text.data() + end) {
        throw input_error(file.string(), fmt::format("index {}", ids.size()), "'{}' is not an integer token id",
                          text.substr(at, end - at));
      }
      ids.push_back(value);
      after_comma = false;
      at = end;
    }
  }
  if (ids.empty()) throw input_error(file.string(), "--feed-ids", "holds no token ids");
  return ids;
}

namespace {

// The reference's logits for prompt + fed, [positions, vocab]: with the KV cache, the prompt in
// one forward and then each fed id in its own step; with recompute, the whole sequence at once
// (what the recompute path's last step computes).
MatrixRM reference_fed_logits(const ReferenceModel& model, std::span<const std::int32_t> prompt,
                              std::span<const std::int32_t> fed, DecodePath path) {
  std::vector<std::int32_t> sequence(prompt.begin(), prompt.end());
  sequence.insert(sequence.end(), fed.begin(), fed.end());
  if (path == DecodePath::kFullRecompute) return model.forward(sequence);
  const Eigen::Index V = model.config().vocab_size;
  MatrixRM logits(static_cast<Eigen::Index>(sequence.size()), V);
  KVCache cache(model.config(), static_cast<std::int64_t>(sequence.size()));
  logits.topRows(static_cast<Eigen::Index>(prompt.size())) = model.forward(prompt, cache);
  for (std::size_t i = 0; i < fed.size(); ++i) {
    logits.row(static_cast<Eigen::Index>(prompt.size() + i)) = model.forward(fed.subspan(i, 1), cache).row(0);
  }
  return logits;
}

}  // namespace

int run_generate(const GenerateArgs& args) {
  const std::filesystem::path dir =
      args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  const std::vector<std::int64_t> ids = parse_token_ids(args.ids);
  if (args.prompt.empty() && ids.empty() && args.chat.empty()) {
    throw input_error("request", "prompt", "empty prompt: give --prompt TEXT, --chat TEXT or --ids 1,2,3");
  }
  // Outputs and inputs checked before any model work.
  if (!args.dump_logits.empty()) check_output_file(args.dump_logits, "--dump-logits");
  const bool feeding = !args.feed_ids.empty();
  const std::vector<std::int64_t> feed_ids = feeding ? read_feed_ids(args.feed_ids) : std::vector<std::int64_t>{};
  const ReferenceModel model = ReferenceModel::load(dir);
  const std::optional<Tokenizer> tokenizer = Tokenizer::find(dir);

  std::vector<std::int32_t> prompt;
  if (!args.chat.empty()) {
    if (!tokenizer) throw input_error(dir.string(), "tokenizer", "--chat needs the model's tokenizer");
    const std::optional<std::string> chat_template = find_chat_template(dir);
    if (!chat_template) {
      throw input_error(dir.string(), "chat template",
                        "--chat needs a chat template (GGUF tokenizer.chat_template or tokenizer_config.json "
                        "chat_template); give the rendered prompt with --prompt");
    }
    prompt = tokenizer->encode(render_chat(*chat_template, {{"user", args.chat}}, true, dir.string()), false);
  } else if (!args.prompt.empty()) {
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

  // The fed ids: each in the vocabulary, and the whole sequence within the model's positions.
  if (feeding) model.check_tokens(prompt, 0, "prompt");
  std::vector<std::int32_t> fed;
  for (std::size_t i = 0; i < feed_ids.size(); ++i) {
    const std::int64_t id = feed_ids[i];
    if (id < 0 || id >= model.config().vocab_size) {
      throw input_error(args.feed_ids, fmt::format("index {}", i), "token id {} is outside the vocabulary [0, {}) of {}",
                        id, model.config().vocab_size, model.origin());
    }
    const auto length = static_cast<std::int64_t>(prompt.size() + i + 1);
    if (length > model.config().max_position_embeddings) {
      throw input_error(args.feed_ids, fmt::format("index {}", i),
                        "the prompt ({} tokens) and the ids up to this one are {} positions, more than "
                        "max_position_embeddings {} of {}",
                        prompt.size(), length, model.config().max_position_embeddings, model.origin());
    }
    fed.push_back(static_cast<std::int32_t>(id));
  }

  // A policy asked of the reference engine would be silently ignored: it keeps every token exactly.
  if (args.engine != "optimized" && args.policy != "full-fp32") {
    throw input_error("--policy", args.policy, "applies to --engine optimized; the reference engine keeps the exact cache");
  }
  GenerateResult result;
  std::vector<std::int32_t> argmax;  // with --feed-ids: the model's own choice at each fed step
  if (args.engine == "optimized") {
    if (args.decode_path != "cache") throw input_error("--decode-path", "value", "only the reference has a recompute path");
    std::unique_ptr<Engine> engine = make_engine(model, single_request_engine_options(args, args.policy));
    EngineGenerateOptions go;
    go.max_new_tokens = feeding ? static_cast<std::int64_t>(fed.size()) : args.max_new_tokens;
    go.stop_at_eos = !args.ignore_eos && !feeding;
    go.keep_logits = !args.dump_logits.empty();
    go.forced = fed;
    EngineGenerateResult er = engine_generate(*engine, 0, prompt, go);
    result.generated = er.generated;
    result.stop_reason = stop_reason_name(er.stop_reason);
    argmax = er.greedy;
    if (go.keep_logits) {
      const Eigen::Index v = model.config().vocab_size;
      result.logits = Eigen::Map<const MatrixRM>(er.logits.data(), static_cast<Eigen::Index>(er.logits.size()) / v, v);
    }
    fmt::print("engine: optimized, device {}, policy {}\n", args.device, args.policy);
  } else if (feeding) {
    result.logits = reference_fed_logits(model, prompt, fed,
                                         args.decode_path == "recompute" ? DecodePath::kFullRecompute : DecodePath::kKVCache);
    result.generated = fed;
    for (std::size_t i = 0; i < fed.size(); ++i) {
      const auto row = static_cast<Eigen::Index>(prompt.size() + i - 1);
      const std::span<const float> logits(result.logits.row(row).data(), static_cast<std::size_t>(result.logits.cols()));
      argmax.push_back(argmax_token(logits, row));
    }
  } else {
    GenerateOptions options;
    options.max_new_tokens = args.max_new_tokens;
    options.path = args.decode_path == "recompute" ? DecodePath::kFullRecompute : DecodePath::kKVCache;
    options.stop_at_eos = !args.ignore_eos;
    options.keep_logits = !args.dump_logits.empty();
    result = generate_greedy(model, prompt, options);
  }

  fmt::print("prompt ids: {}\n", fmt::join(prompt, " "));
  if (feeding) {
    fmt::print("fed ids: {} ({} from {})\n", fmt::join(result.generated, " "), result.generated.size(), args.feed_ids);
    fmt::print("argmax ids: {}\n", fmt::join(argmax, " "));
  } else {
    fmt::print("generated ids: {}\n", fmt::join(result.generated, " "));
  }
  if (tokenizer) {
    fmt::print("prompt text: {}\n", tokenizer->decode(prompt));
    fmt::print("{} text: {}\n", feeding ? "fed" : "generated", tokenizer->decode(result.generated));
  }
  if (!feeding) fmt::print("stop: {}\n", result.stop_reason);
  if (!args.dump_logits.empty()) {
    write_file_atomically(args.dump_logits, "--dump-logits", [&](const std::filesystem::path& tmp) {
      write_npy_f32(tmp, result.logits.rows(), result.logits.cols(),
                    std::span<const float>(result.logits.data(), static_cast<std::size_t>(result.logits.size())));
    });
    fmt::print("logits: {} [{}, {}] float32\n", args.dump_logits, result.logits.rows(), result.logits.cols());
  }
  return 0;
}

}  // namespace kvcheck::cli
