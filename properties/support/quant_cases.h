// Random KV blocks for the quantization tests: formats, shapes and value distributions that
// look like real keys and values, and the edges (constant, tiny, huge, signed zeros).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/quant_format.h"

namespace kvcheck::testing {

enum class ValueDist {
  kNormal,          // N(0, 1)
  kOutlierChannels, // heavy-tailed (Student-t-like), a few channels scaled 10-100x: real keys
  kUniform,         // U(c - w, c + w), a narrow range far from zero as easily as a wide one
  kConstant,        // one value everywhere (an fp16 number, a float that is not, ±0)
  kTiny,            // magnitudes 1e-3 down to float subnormals
  kHuge,            // magnitudes up to the fp16 limit below zero, up to 131008 above it
  kSignedZeros,     // mostly +0 and -0, a few ordinary values
};
inline constexpr int kValueDistCount = 7;
const char* value_dist_name(ValueDist dist);

// Every integer format of the issue: 8/4/2 bits x per token, per channel (G 16/32/128), per
// group of 32 channels (g must divide head_dim: the generators pick head_dims that it does).
std::vector<QuantSpec> all_int_specs();

// tokens x head_dim values of `dist`, from `seed` (deterministic, portable).
std::vector<float> make_values(ValueDist dist, std::int64_t tokens, std::int64_t head_dim, std::uint64_t seed);

}  // namespace kvcheck::testing
