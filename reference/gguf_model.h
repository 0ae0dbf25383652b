// A GGUF file as a kvcheck model: the config from the `<arch>.*` keys, the tensors under their
// Hugging Face names and in Hugging Face layout, and the tokenizer from the `tokenizer.ggml.*`
// keys as a tokenizer.json that the tokenizer.json pipeline runs.
//
// Architectures: llama (Llama 2/3, Mistral, SmolLM), qwen2, qwen3. Weights are dequantized to
// float32 once, at load (reference/gguf_quants.h; F32 tensors stay in the mapping, F16/BF16 keep
// their dtype). Q and K of `llama` files carry llama.cpp's converter row permutation (it
// interleaves the two rotated halves of each head, for ggml's pair-wise RoPE); it is undone here,
// so the reference's RoPE, every policy and every oracle see the same channels as from the
// Hugging Face checkpoint, and make-model --from-gguf writes a checkpoint transformers reads.
// qwen2 / qwen3 files are not permuted (llama.cpp runs them with NeoX RoPE).
//
// f32 metadata values are read as the shortest decimal that rounds to them (1e-05, not
// 9.99999974738e-06): the value the converter was given.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "reference/config.h"
#include "reference/gguf.h"
#include "reference/tensor.h"

namespace kvcheck {

struct GgufModel {
  ModelConfig config;
  std::shared_ptr<const TensorSource> tensors;  // Hugging Face names
  std::optional<std::string> chat_template;     // tokenizer.chat_template
};

// The config the file's metadata and tensor list describe. InputError naming the file and key.
ModelConfig gguf_model_config(const GgufFile& file);

// Opens, checks and dequantizes (on every core). InputError naming the file and the key or
// tensor; a type kvcheck does not read is refused naming the type and the tensor.
GgufModel load_gguf_model(const std::filesystem::path& path);

// The tokenizer.json equivalent of the file's tokenizer.ggml.* keys (model "gpt2": byte-level
// BPE with the pre-tokenizer `tokenizer.ggml.pre` names; model "llama": SentencePiece-style BPE
// with byte fallback, merges ranked by the merged token's score), and the BOS / EOS ids (-1:
// none). InputError naming the key for anything it cannot represent.
struct GgufTokenizer {
  nlohmann::json tokenizer_json;
  std::int32_t bos_id = -1;
  std::int32_t eos_id = -1;
};
GgufTokenizer gguf_tokenizer(const GgufFile& file);

// Hugging Face name of a GGUF tensor name ("blk.3.attn_q.weight" ->
// "model.layers.3.self_attn.q_proj.weight"); nullopt for a name kvcheck does not map.
std::optional<std::string> hf_tensor_name(const std::string& gguf_name);
// The reverse, for writers.
std::optional<std::string> gguf_tensor_name(const std::string& hf_name);

// The metadata llama.cpp's converter writes for `config` (general.architecture and the
// `<arch>.*` keys). InputError for what GGUF cannot say (llama3 rope_scaling, a sliding window).
std::vector<std::pair<std::string, GgufValue>> gguf_model_metadata(const ModelConfig& config);

// Writes `weights` (Hugging Face names, F32/F16/BF16, as stored; Q/K rows permuted for llama as
// the converter does) with gguf_model_metadata(config) and then `extra` (a tokenizer, say).
void write_gguf_model(const std::filesystem::path& path, const ModelConfig& config, const TensorSource& weights,
                      const std::vector<std::pair<std::string, GgufValue>>& extra = {});

// llama.cpp's converter row order for Q / K of `llama` files: GGUF row h*d + 2i + t holds
// Hugging Face row h*d + t*d/2 + i (d = head_dim, h a head, t in {0, 1}, i < d/2).
std::int64_t gguf_row_of_hf_row(std::int64_t hf_row, std::int64_t head_dim);

}  // namespace kvcheck
