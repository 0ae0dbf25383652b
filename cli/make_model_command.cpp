// kvcheck make-model: write a random-weight Hugging Face checkpoint.
#include <filesystem>

#include <fmt/format.h>

#include "cli/commands.h"
#include "reference/errors.h"
#include "reference/random_model.h"
#include "reference/tokenizer.h"

namespace kvcheck::cli {

void add_make_model(CLI::App& app, MakeModelArgs& args) {
  CLI::App* cmd = app.add_subcommand("make-model", "Write a random-weight HF-format checkpoint");
  cmd->add_flag("--random", args.random, "Random weights (the only kind for now)")->required();
  cmd->add_option("--family", args.family, "Model family")
      ->capture_default_str()
      ->check(CLI::IsMember({"llama", "mistral", "qwen2"}));
  cmd->add_option("--layers", args.layers, "Decoder layers")->capture_default_str();
  cmd->add_option("--hidden", args.hidden, "Hidden size")->capture_default_str();
  cmd->add_option("--heads", args.heads, "Query heads")->capture_default_str();
  cmd->add_option("--kv-heads", args.kv_heads, "Key/value heads")->capture_default_str();
  cmd->add_option("--head-dim", args.head_dim, "Head dimension (default: hidden / heads)");
  cmd->add_option("--intermediate", args.intermediate, "MLP size (default: 8/3 hidden, rounded up to 32)");
  cmd->add_option("--vocab", args.vocab, "Vocabulary size (default: the tokenizer's)");
  cmd->add_option("--max-positions", args.max_positions, "max_position_embeddings")->capture_default_str();
  cmd->add_option("--rope-theta", args.rope_theta, "RoPE base")->capture_default_str();
  cmd->add_flag("--tie", args.tie, "Tie the LM head to the embedding");
  cmd->add_option("--dtype", args.dtype, "Weight dtype")->capture_default_str()->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->add_option("--tokenizer", args.tokenizer, "SentencePiece tokenizer.model to copy into the checkpoint");
  cmd->add_option("--seed", args.seed, "Seed of the weights")->capture_default_str();
  cmd->add_option("--out", args.out, "Output directory")->required();
}

int run_make_model(const MakeModelArgs& args) {
  ModelConfig c;
  c.family = args.family == "mistral" ? ModelFamily::kMistral
             : args.family == "qwen2" ? ModelFamily::kQwen2
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
  c.torch_dtype = args.dtype == "f32" ? "float32" : args.dtype == "f16" ? "float16" : "bfloat16";

  std::optional<std::filesystem::path> tokenizer_path;
  c.vocab_size = args.vocab;
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
  if (c.vocab_size <= 0) throw input_error("--vocab", "vocab_size", "give --vocab V or --tokenizer FILE");

  const DType dtype = args.dtype == "f32" ? DType::kF32 : args.dtype == "f16" ? DType::kF16 : DType::kBF16;
  validate_config(c, "make-model flags");
  const TensorMap weights = make_random_weights(c, dtype, args.seed);
  write_model(args.out, c, weights, tokenizer_path);
  fmt::print("wrote {} (family {}, {} layers, hidden {}, heads {}/{}, vocab {}, {}, seed {})\n", args.out, args.family,
             c.num_hidden_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.vocab_size,
             args.dtype, args.seed);
  return 0;
}

}  // namespace kvcheck::cli
