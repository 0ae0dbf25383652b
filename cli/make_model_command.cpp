// kvcheck make-model: write a random-weight Hugging Face checkpoint, of flags' shape or of a
// published model's shape (--shape), with a SentencePiece or tokenizer.json tokenizer copied in;
// or (--from-gguf) a GGUF model as a Hugging Face checkpoint: config.json, F32 safetensors (the
// weights dequantized, Q/K rows in Hugging Face order), tokenizer.json and tokenizer_config.json.
#include <algorithm>
#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "reference/dummy_model.h"
#include "reference/errors.h"
#include "reference/gguf.h"
#include "reference/gguf_model.h"
#include "reference/random_model.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {
namespace {

// The files of a Hugging Face tokenizer that sit beside tokenizer.json and are copied with it.
constexpr std::array<const char*, 2> kTokenizerCompanions{"tokenizer_config.json", "generation_config.json"};

void copy_tokenizer_json(const std::filesystem::path& file, const std::filesystem::path& dir) {
  const auto overwrite = std::filesystem::copy_options::overwrite_existing;
  std::filesystem::copy_file(file, dir / "tokenizer.json", overwrite);
  for (const char* name : kTokenizerCompanions) {
    const std::filesystem::path beside = file.parent_path() / name;
    if (std::filesystem::is_regular_file(beside)) std::filesystem::copy_file(beside, dir / name, overwrite);
  }
}

// Scales the planted outlier channels' rows of every layer's k_proj (MakeModelArgs says which).
void plant_outlier_key_channels(const ModelConfig& c, DType dtype, std::int64_t channels, double scale,
                                TensorMap& weights) {
  if (channels < 0 || channels > c.head_dim / 2) {
    throw input_error("--outlier-key-channels", "channels", "{} is outside [0, head_dim / 2 = {}]", channels,
                      c.head_dim / 2);
  }
  if (!(scale > 0.0) || !std::isfinite(scale)) {
    throw input_error("--outlier-scale", "scale", "{} must be a positive number", scale);
  }
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    for (const char* part : {"weight", "bias"}) {
      const std::string name = fmt::format("model.layers.{}.self_attn.k_proj.{}", l, part);
      const std::optional<TensorView> t = weights.find(name);
      if (!t) continue;  // no k bias in this family
      std::vector<float> x(static_cast<std::size_t>(t->numel()));
      to_float(*t, x, name);
      const std::vector<std::int64_t> shape = t->shape;
      const std::int64_t row = shape.size() == 2 ? shape[1] : 1;  // weight [kv_dim][hidden], bias [kv_dim]
      for (std::int64_t h = 0; h < c.num_key_value_heads; ++h) {
        for (std::int64_t i = 0; i < channels; ++i) {
          const std::int64_t channel = h * c.head_dim + c.head_dim / 2 - 1 - i;
          for (std::int64_t j = 0; j < row; ++j) {
            float& w = x[static_cast<std::size_t>(channel * row + j)];
            w = static_cast<float>(w * scale);
          }
        }
      }
      weights.add_float(name, dtype, shape, x);
    }
  }
}

}  // namespace

void add_make_model(CLI::App& app, MakeModelArgs& args) {
  CLI::App* cmd = app.add_subcommand("make-model", "Write a random-weight HF-format checkpoint, or convert a GGUF file to one");
  CLI::Option* random = cmd->add_flag("--random", args.random, "Random weights");
  CLI::Option* gguf = cmd->add_option("--from-gguf", args.from_gguf,
                                      "Convert this GGUF file (weights dequantized to F32, its tokenizer as tokenizer.json)");
  random->excludes(gguf);
  CLI::Option* shape = cmd->add_option("--shape", args.shape, "A published model's shape, config and bf16 weights (reference/dummy_model.h)")
                           ->check(CLI::IsMember(std::vector<std::string>(dummy_shape_names().begin(),
                                                                          dummy_shape_names().end())));
  // Every flag that sets a part of the shape conflicts with --shape (an error naming both).
  const std::vector<CLI::Option*> shape_flags{
      cmd->add_option("--family", args.family, "Model family")
          ->capture_default_str()
          ->check(CLI::IsMember({"llama", "mistral", "qwen2", "qwen3"})),
      cmd->add_option("--layers", args.layers, "Decoder layers")->capture_default_str(),
      cmd->add_option("--hidden", args.hidden, "Hidden size")->capture_default_str(),
      cmd->add_option("--heads", args.heads, "Query heads")->capture_default_str(),
      cmd->add_option("--kv-heads", args.kv_heads, "Key/value heads")->capture_default_str(),
      cmd->add_option("--head-dim", args.head_dim, "Head dimension (default: hidden / heads)"),
      cmd->add_option("--intermediate", args.intermediate, "MLP size (default: 8/3 hidden, rounded up to 32)"),
      cmd->add_option("--vocab", args.vocab, "Vocabulary size (default: the tokenizer's)"),
      cmd->add_option("--max-positions", args.max_positions, "max_position_embeddings")->capture_default_str(),
      cmd->add_option("--rope-theta", args.rope_theta, "RoPE base")->capture_default_str(),
      cmd->add_flag("--tie", args.tie, "Tie the LM head to the embedding"),
  };
  for (CLI::Option* flag : shape_flags) shape->excludes(flag);
  for (CLI::Option* flag : shape_flags) gguf->excludes(flag);
  gguf->excludes(shape);
  cmd->add_option("--dtype", args.dtype, "Weight dtype (default f32; bf16 with --shape)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  CLI::Option* sp = cmd->add_option("--tokenizer", args.tokenizer, "SentencePiece tokenizer.model to copy into the checkpoint");
  CLI::Option* hf = cmd->add_option("--tokenizer-json", args.tokenizer_json,
                                    "Hugging Face tokenizer.json to copy into the checkpoint (with the "
                                    "tokenizer_config.json and generation_config.json beside it)");
  sp->excludes(hf);
  shape->excludes(sp);
  cmd->add_option("--seed", args.seed, "Seed of the weights")->capture_default_str();
  cmd->add_option("--outlier-key-channels", args.outlier_key_channels,
                  "Plant N outlier key channels per kv head: rows d/2-1, d/2-2, ... of each head's block of W_k "
                  "(and the k bias) times --outlier-scale")
      ->capture_default_str();
  cmd->add_option("--outlier-scale", args.outlier_scale, "Scale of the planted outlier key channels")
      ->capture_default_str();
  cmd->add_option("--out", args.out, "Output directory")->required();
}

namespace {

// make-model --from-gguf: the GGUF model as a Hugging Face directory.
int convert_gguf(const MakeModelArgs& args) {
  const std::filesystem::path file = args.from_gguf;
  if (!is_gguf_file(file)) throw input_error(file.string(), "--from-gguf", "not a GGUF file (no such file, or no GGUF magic)");
  const GgufModel model = load_gguf_model(file);
  std::optional<GgufTokenizer> tok;
  const GgufFile gguf = GgufFile::open(file);
  if (gguf.find("tokenizer.ggml.model") != nullptr) tok = gguf_tokenizer(gguf);
  write_model(args.out, model.config, *model.tensors);
  const std::filesystem::path out = args.out;
  if (tok) {
    const auto write_json = [&](const char* name, const nlohmann::json& j) {
      std::ofstream o(out / name, std::ios::binary | std::ios::trunc);
      o << j.dump(1) << '\n';
      if (!o) throw std::runtime_error(fmt::format("{}: write failed", (out / name).string()));
    };
    write_json("tokenizer.json", tok->tokenizer_json);
    nlohmann::json config = nlohmann::json::object();
    const nlohmann::json& vocab = tok->tokenizer_json["model"]["vocab"];
    const auto token_text = [&](std::int32_t id) -> nlohmann::json {
      for (const auto& added : tok->tokenizer_json["added_tokens"]) {
        if (added["id"] == id) return added["content"];
      }
      for (const auto& [text, v] : vocab.items()) {
        if (v == id) return text;
      }
      return nullptr;
    };
    if (tok->bos_id >= 0) config["bos_token"] = token_text(tok->bos_id);
    if (tok->eos_id >= 0) config["eos_token"] = token_text(tok->eos_id);
    if (model.chat_template) config["chat_template"] = *model.chat_template;
    write_json("tokenizer_config.json", config);
  }
  const ModelConfig& c = model.config;
  fmt::print("wrote {} from {} (family {}, {} layers, hidden {}, heads {}/{}, head_dim {}, vocab {}, f32{})\n", args.out,
             file.string(), family_name(c.family), c.num_hidden_layers, c.hidden_size, c.num_attention_heads,
             c.num_key_value_heads, c.head_dim, c.vocab_size, tok ? ", tokenizer.json" : ", no tokenizer in the file");
  return 0;
}

}  // namespace

int run_make_model(const MakeModelArgs& args) {
  if (!args.from_gguf.empty()) return convert_gguf(args);
  if (!args.random) throw input_error("make-model", "--random", "give --random (random weights) or --from-gguf FILE");
  const std::string dtype_flag = !args.dtype.empty() ? args.dtype : args.shape.empty() ? "f32" : "bf16";
  ModelConfig c;
  if (!args.shape.empty()) {
    c = dummy_shape_config(args.shape);
  } else {
    c.family = args.family == "mistral" ? ModelFamily::kMistral
               : args.family == "qwen2" ? ModelFamily::kQwen2
               : args.family == "qwen3" ? ModelFamily::kQwen3
                                        : ModelFamily::kLlama;
    c.qkv_bias = c.family == ModelFamily::kQwen2;
    c.num_hidden_layers = args.layers;
    c.hidden_size = args.hidden;
    c.num_attention_heads = args.heads;
    c.num_key_value_heads = args.kv_heads;
    c.head_dim = args.head_dim > 0 ? args.head_dim : (args.heads > 0 ? args.hidden / args.heads : 0);
    c.intermediate_size = args.intermediate > 0 ? args.intermediate : (8 * args.hidden / 3 + 31) / 32 * 32;
    c.max_position_embeddings = args.max_positions;
    c.rope_theta = args.rope_theta;
    c.tie_word_embeddings = args.tie;
    c.rms_norm_eps = 1e-5;
    c.vocab_size = args.vocab;
  }
  c.torch_dtype = dtype_flag == "f32" ? "float32" : dtype_flag == "f16" ? "float16" : "bfloat16";

  std::optional<std::filesystem::path> tokenizer_path;
  if (!args.tokenizer.empty()) {
    tokenizer_path = args.tokenizer;
    const Tokenizer tok = Tokenizer::load(*tokenizer_path);
    if (c.vocab_size == 0) c.vocab_size = tok.vocab_size();
    if (c.vocab_size < tok.vocab_size()) {
      throw input_error("--vocab", "vocab_size", "{} is smaller than the tokenizer's vocabulary ({}, {})",
                        c.vocab_size, tok.vocab_size(), args.tokenizer);
    }
    if (tok.bos_id() >= 0) c.bos_token_id = tok.bos_id();
    if (tok.eos_id() >= 0) c.eos_token_ids = {tok.eos_id()};
  }
  if (!args.tokenizer_json.empty()) {
    const std::filesystem::path file = args.tokenizer_json;
    if (!std::filesystem::is_regular_file(file)) throw input_error(file.string(), "--tokenizer-json", "no such file");
    // The whole file is read as kvcheck will use it (a tokenizer it cannot read is refused here).
    const Tokenizer tok = Tokenizer::load(file);
    const std::int64_t ids = tok.vocab_size();
    if (c.vocab_size == 0) c.vocab_size = ids;
    if (args.shape.empty()) {  // a shape keeps its published ids
      if (tok.bos_id() >= 0) c.bos_token_id = tok.bos_id();
      if (tok.eos_id() >= 0) c.eos_token_ids = {tok.eos_id()};
    }
    if (ids > c.vocab_size) {
      throw input_error(file.string(), "vocabulary",
                        "the tokenizer has ids up to {}, past the model's vocab_size {}{} (its embedding has no row for them)",
                        ids - 1, c.vocab_size, args.shape.empty() ? "" : fmt::format(" of shape {}", args.shape));
    }
  }
  if (c.vocab_size <= 0) {
    throw input_error("--vocab", "vocab_size", "give --vocab V, --tokenizer FILE or --tokenizer-json FILE");
  }

  const DType dtype = dtype_flag == "f32" ? DType::kF32 : dtype_flag == "f16" ? DType::kF16 : DType::kBF16;
  validate_config(c, "make-model flags");
  TensorMap weights = make_random_weights(c, dtype, args.seed);
  if (args.outlier_key_channels != 0) {
    plant_outlier_key_channels(c, dtype, args.outlier_key_channels, args.outlier_scale, weights);
  }
  write_model(args.out, c, weights, tokenizer_path);
  if (!args.tokenizer_json.empty()) copy_tokenizer_json(args.tokenizer_json, args.out);
  fmt::print("wrote {} ({}family {}, {} layers, hidden {}, heads {}/{}, head_dim {}, vocab {}, {}, seed {}{})\n", args.out,
             args.shape.empty() ? "" : fmt::format("shape {}, ", args.shape), family_name(c.family),
             c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim,
             c.vocab_size, dtype_flag, args.seed,
             args.outlier_key_channels == 0
                 ? std::string()
                 : fmt::format(", {} outlier key channels x{}", args.outlier_key_channels, args.outlier_scale));
  return 0;
}

}  // namespace kvcheck::cli
