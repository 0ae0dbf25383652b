// CUDA versions of the KV quantizers (kernels/cpu/quantize.h and fp8_e4m3.h are the CPU twins;
// both run the scalar code of kernels/quant_math.h and agree bit for bit).
//
// Host-callable: each function copies its host arguments to the device, runs the kernels and
// copies the results back, so tests can hold them against the CPU twin. Layouts and error
// behaviour are those of the CPU twin (NaN/Inf or |x| > 65504: the same InputError). Without a
// CUDA build (kvcheck::cuda_compiled() false) or without a device every function throws
// std::runtime_error saying so.
//
// Raw pointers rather than spans: nvcc compiles the caller side of this header as C++17.
#pragma once

#include <cstdint>

#include "kernels/quant_format.h"

namespace kvcheck {

// x: [tokens][head_dim]; codes: [tokens][row_bytes]; scales, zeros: [meta_count] fp16 bits.
void quantize_cuda(const QuantSpec& spec, const float* x, std::int64_t tokens, std::int64_t head_dim,
                   const KvLocation& at, std::uint8_t* codes, std::uint16_t* scales, std::uint16_t* zeros);
// out: [tokens][head_dim].
void dequantize_cuda(const QuantSpec& spec, const std::uint8_t* codes, const std::uint16_t* scales,
                     const std::uint16_t* zeros, std::int64_t tokens, std::int64_t head_dim, float* out);
// Fused dequantize-dot, scores[t] = q · x̂_t (q: [head_dim], scores: [tokens]): the same folding of
// the metadata into the query and the same order of float operations as the CPU twin
// dot_dequantized, with no fused multiply-adds, so the scores are bit-identical to it.
void dot_dequantized_cuda(const QuantSpec& spec, const float* q, const std::uint8_t* codes,
                          const std::uint16_t* scales, const std::uint16_t* zeros, std::int64_t tokens,
                          std::int64_t head_dim, float* scores);
// x: [tokens][head_dim]; codes: [tokens][head_dim]. Returns the per-head scale.
float quantize_fp8_e4m3_cuda(const float* x, std::int64_t tokens, std::int64_t head_dim, const KvLocation& at,
                             std::uint8_t* codes);
// codes, out: [n].
void dequantize_fp8_e4m3_cuda(const std::uint8_t* codes, std::int64_t n, float scale, float* out);

// Device throughput of quantizing fp16 input already on the device, for bench/: seconds per
// call (mean over `iterations`, CUDA events), and of a device-to-device cudaMemcpy of the same
// input bytes measured in the same run. spec == nullptr times FP8 E4M3.
struct CudaQuantTiming {
  double quantize_seconds = 0.0;
  double memcpy_seconds = 0.0;
};
CudaQuantTiming time_quantize_f16_cuda(const QuantSpec* spec, std::int64_t tokens, std::int64_t head_dim,
                                       int iterations);

}  // namespace kvcheck
