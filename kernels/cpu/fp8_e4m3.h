// FP8 E4M3 KV storage with one fp32 scale per (layer, kv-head): the production baseline of vLLM
// and FlashInfer. CPU twin; kernels/quantize_cuda.h has the CUDA version.
//
//   scale  s = max(amax / 448, smallest normal float), amax over the whole block
//   code   c = e4m3(x / s), round to nearest even, saturating at ±448
//   value  x̂ = fl(e4m3_value(c) * s)
// Any finite input is accepted (the scale is fp32, so there is no fp16 range limit); NaN and
// ±Inf are rejected with the same InputError as the integer formats.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/quant_format.h"

namespace kvcheck {

// x: [tokens][head_dim]; codes: [tokens][head_dim] (one byte each). Returns the per-head scale.
float quantize_fp8_e4m3(std::span<const float> x, std::int64_t tokens, std::int64_t head_dim, const KvLocation& at,
                        std::span<std::uint8_t> codes);
// With a given (static, calibrated) scale, as vLLM's k_scale / v_scale: values beyond 448 * scale
// saturate, so the error bound holds only for |x| <= 448 * scale.
void quantize_fp8_e4m3_with_scale(std::span<const float> x, std::int64_t tokens, std::int64_t head_dim, float scale,
                                  const KvLocation& at, std::span<std::uint8_t> codes);
// out: [tokens][head_dim].
void dequantize_fp8_e4m3(std::span<const std::uint8_t> codes, float scale, std::span<float> out);
// scores[t] = q · x̂_t = s · Σ q_c e4m3_value(c): the scale is applied once per token.
void dot_fp8_e4m3(std::span<const float> q, std::span<const std::uint8_t> codes, float scale, std::int64_t tokens,
                  std::int64_t head_dim, std::span<float> scores);

}  // namespace kvcheck
