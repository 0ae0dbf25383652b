// Random-weight checkpoints in Hugging Face format, for tests and dummy-weight benchmarks.
//
// Weights are drawn from a portable generator (SplitMix64 + Box-Muller, no std:: distributions,
// whose output differs between standard libraries), seeded per tensor from (seed, tensor name),
// so the same seed gives the same bytes on every machine.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>

#include "reference/config.h"
#include "reference/tensor.h"

namespace kvcheck {

// Scales: embedding rows ~ N(0, 1); projection matrices ~ N(0, 1/in_features) so activations
// keep unit scale; biases ~ N(0, 0.02^2); norm weights ~ 1 + N(0, 0.1^2), so that a forgotten
// multiplication by the norm weight changes the logits.
TensorMap make_random_weights(const ModelConfig& config, DType dtype, std::uint64_t seed);

// Writes DIR/config.json, DIR/model.safetensors and, if given, copies DIR/tokenizer.model.
// Creates DIR. Validates the config first.
void write_model(const std::filesystem::path& dir, const ModelConfig& config, const TensorSource& weights,
                 const std::optional<std::filesystem::path>& tokenizer = std::nullopt);

// A 64-bit hash of a string (FNV-1a), used to derive per-tensor seeds.
std::uint64_t fnv1a64(std::string_view s);

}  // namespace kvcheck
