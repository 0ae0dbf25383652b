// Dummy-weight models of real shapes, without files (vLLM's dummy load format): a named shape's
// config and seeded random weights (reference/random_model.h) held in memory, so that benchmarks
// run at Llama-3-8B sizes on a machine that has no checkpoint. The same table gives
// `make-model --random --shape` its configs (one table of shapes for both).
//
// Shapes (from the models' published config.json files; bf16, bos/eos ids as published):
//   llama3-8b    32 layers, hidden 4096, 32 heads / 8 kv heads, head_dim 128, MLP 14336,
//                vocab 128256, context 8192, rope_theta 500000
//   qwen2.5-7b   28 layers, hidden 3584, 28 heads / 4 kv heads, head_dim 128, MLP 18944,
//                vocab 152064, context 32768, rope_theta 1e6, QKV biases
//   llama2-7b    32 layers, hidden 4096, 32 heads / 32 kv heads, head_dim 128, MLP 11008,
//                vocab 32000, context 4096, rope_theta 10000
//   kvcheck-tiny the embedded model's shape (4 layers, hidden 128, 4 / 2 heads), for quick runs
//   qwen2.5-0.5b 24 layers, hidden 896, 14 heads / 2 kv heads, head_dim 64, MLP 4864,
//                vocab 151936, context 32768, rope_theta 1e6, QKV biases, tied
//   qwen3-0.6b   28 layers, hidden 1024, 16 heads / 8 kv heads, head_dim 128, MLP 3072,
//                vocab 151936, context 40960, rope_theta 1e6, q/k norms, tied
//   llama3.2-1b  16 layers, hidden 2048, 32 heads / 8 kv heads, head_dim 64, MLP 8192,
//                vocab 128256, context 131072, rope_theta 500000, llama3 rope scaling
//                (factor 32, low 1, high 4, original 8192), tied
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "reference/config.h"
#include "reference/model.h"

namespace kvcheck {

std::span<const char* const> dummy_shape_names();

// The named shape's config; `layers` > 0 keeps only that many layers (a smaller run of the same
// layer shape). InputError naming --shape for an unknown name (listing the known ones) or
// --dummy-layers for a negative count.
ModelConfig dummy_shape_config(std::string_view shape, std::int64_t layers = 0);

// A model of that config with random bf16 weights (seeded), origin "dummy:<shape>".
ReferenceModel make_dummy_model(const ModelConfig& config, std::string_view shape, std::uint64_t seed);

}  // namespace kvcheck
