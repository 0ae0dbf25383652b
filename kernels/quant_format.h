// What a quantized KV block looks like: bit width, granularity, group size, and where each code
// and scale lives. Plain data shared by the CPU twin, the CUDA kernels and the oracles.
#pragma once

#include <cstdint>
#include <string>

namespace kvcheck {

// Which elements share one fp16 (scale, zero) pair.
enum class Granularity {
  kPerToken,       // one pair per token per head (LeanKV keys and values, KIVI values)
  kPerChannel,     // one pair per channel over a group of G tokens (KIVI / MiniKV keys)
  kPerTokenGroup,  // one pair per group of g consecutive channels within a token
};

// Asymmetric min-max integer quantization of one (layer, kv-head) block of tokens.
//
// Layouts, for a block x of shape [tokens][head_dim] (row-major):
//   codes   [tokens][head_dim / codes_per_byte]: each token's codes packed along the channels,
//           codes_per_byte() per byte, the first channel in the lowest bits
//   scales, zeros (fp16 bits, same shape):
//           kPerToken       [tokens]
//           kPerChannel     [tokens / G][head_dim]   (tokens must be a multiple of G)
//           kPerTokenGroup  [tokens][head_dim / g]
struct QuantSpec {
  int bits = 8;                                // 8, 4 or 2
  Granularity granularity = Granularity::kPerToken;
  int group = 0;                               // G tokens (kPerChannel) or g channels (kPerTokenGroup)

  int codes_per_byte() const { return 8 / bits; }
  int levels() const { return (1 << bits) - 1; }
  // Tokens that share metadata along the token axis: G for kPerChannel, else 1.
  int token_group() const { return granularity == Granularity::kPerChannel ? group : 1; }
  std::int64_t row_bytes(std::int64_t head_dim) const { return head_dim / codes_per_byte(); }
  // (scale, zero) pairs for `tokens` quantized tokens.
  std::int64_t meta_count(std::int64_t tokens, std::int64_t head_dim) const {
    switch (granularity) {
      case Granularity::kPerToken: return tokens;
      case Granularity::kPerChannel: return tokens / group * head_dim;
      case Granularity::kPerTokenGroup: return tokens * (head_dim / group);
    }
    return 0;
  }
};

inline QuantSpec per_token(int bits) { return {bits, Granularity::kPerToken, 0}; }
inline QuantSpec per_channel(int bits, int tokens_per_group = 32) {
  return {bits, Granularity::kPerChannel, tokens_per_group};
}
inline QuantSpec per_token_group(int bits, int channels_per_group) {
  return {bits, Granularity::kPerTokenGroup, channels_per_group};
}

// "int4/token", "int2/channel-G32", "int4/group-g32".
std::string quant_spec_name(const QuantSpec& spec);

// Throws InputError unless the spec can quantize heads of `head_dim` channels: bits in {8, 4, 2};
// G in {16, 32, 128}; g > 0 dividing head_dim; head_dim a positive multiple of codes_per_byte.
void validate(const QuantSpec& spec, std::int64_t head_dim);

// Where a block comes from, for error messages ("layer 3, head 1, token 17, channel 5").
struct KvLocation {
  std::int64_t layer = 0;
  std::int64_t head = 0;
  std::int64_t first_token = 0;  // position of the block's row 0
  const char* tensor = "kv";     // "key" or "value"
};

}  // namespace kvcheck
