// Integer KV quantization, CPU twin (kernels/quantize_cuda.h is the CUDA version; both compute
// the scalar formulas of kernels/quant_math.h and agree bit for bit).
//
// Input: one (layer, kv-head) block x of [tokens][head_dim] values, float or fp16 bits. Output
// layouts are those of kernels/quant_format.h. Defined behaviour at the edges:
//   - NaN or ±Inf anywhere: InputError naming layer, head, token and channel; nothing is written
//     that could be mistaken for a result (outputs are left unspecified; callers discard them).
//   - Magnitudes beyond fp16: a group is accepted exactly when its fp16 metadata exists. The
//     zero is the minimum rounded down, so a value below -65504 is an InputError; the scale is
//     (max - zero) / (2^b - 1) rounded up, so a group wider than 65504 x (2^b - 1) is one too.
//     Values above +65504 inside that range are stored faithfully (the bound holds), and so are
//     dequantized values, which can exceed +65504 by up to ŝ/2: re-quantizing them (LeanKV's
//     demotion of a high-precision token) must not fail. No wider metadata path, no clamping.
//   - A constant group whose value is an fp16 number (every group of an fp16 cache): scale 0,
//     zero = the value, codes 0: exact. Other constant floats get the general path (bound holds).
//   - ±0 and subnormals: ordinary values; -0 may come back as +0 (equal as floats).
//   - kPerChannel needs whole groups of G tokens: quantize_block keeps the last tokens % G
//     tokens as the fp16 residual.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/quant_format.h"

namespace kvcheck {

// x: [tokens][head_dim] float; codes: [tokens][row_bytes]; scales, zeros: [meta_count] fp16 bits.
// Validates the spec (InputError) and every input value (see above).
void quantize(const QuantSpec& spec, std::span<const float> x, std::int64_t tokens, std::int64_t head_dim,
              const KvLocation& at, std::span<std::uint8_t> codes, std::span<std::uint16_t> scales,
              std::span<std::uint16_t> zeros);
// The same from fp16 input (bits), as a KV cache in fp16 holds it.
void quantize_f16(const QuantSpec& spec, std::span<const std::uint16_t> x, std::int64_t tokens, std::int64_t head_dim,
                  const KvLocation& at, std::span<std::uint8_t> codes, std::span<std::uint16_t> scales,
                  std::span<std::uint16_t> zeros);

// out: [tokens][head_dim], x̂ = fl(q * ŝ + ẑ).
void dequantize(const QuantSpec& spec, std::span<const std::uint8_t> codes, std::span<const std::uint16_t> scales,
                std::span<const std::uint16_t> zeros, std::int64_t tokens, std::int64_t head_dim, std::span<float> out);

// Fused dequantize-dot: scores[t] = q · x̂_t for every token t, without materialising x̂. The
// metadata is folded into the query once per group (Σ q_c(ŝ code_c + ẑ) = ŝ Σ q_c code_c + ẑ Σ q_c
// per token, Σ (q_c ŝ_c) code_c + Σ q_c ẑ_c per channel group), so it is not bit-identical to
// dot(q, dequantize(...)): oracles/quant_bounds.h bounds the difference.
// q: [head_dim]; scores: [tokens].
void dot_dequantized(const QuantSpec& spec, std::span<const float> q, std::span<const std::uint8_t> codes,
                     std::span<const std::uint16_t> scales, std::span<const std::uint16_t> zeros, std::int64_t tokens,
                     std::int64_t head_dim, std::span<float> scores);

// A quantized block plus its fp16 residual (kPerChannel: the tokens of the last, partial group).
struct QuantizedBlock {
  QuantSpec spec;
  std::int64_t head_dim = 0;
  std::int64_t tokens = 0;                 // quantized tokens (a multiple of spec.token_group())
  std::vector<std::uint8_t> codes;         // [tokens][row_bytes]
  std::vector<std::uint16_t> scales;       // [meta_count] fp16 bits
  std::vector<std::uint16_t> zeros;        // [meta_count] fp16 bits
  std::int64_t residual_tokens = 0;        // tokens after the quantized ones
  std::vector<std::uint16_t> residual;     // [residual_tokens][head_dim] fp16 bits (round to nearest even)
};

QuantizedBlock quantize_block(const QuantSpec& spec, std::span<const float> x, std::int64_t tokens,
                              std::int64_t head_dim, const KvLocation& at);
// [tokens + residual_tokens][head_dim]: the dequantized tokens, then the residual.
std::vector<float> dequantize_block(const QuantizedBlock& block);

}  // namespace kvcheck
