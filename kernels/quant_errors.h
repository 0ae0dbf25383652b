// The error a quantizer raises for a value it cannot store, shared by the CPU twin and the CUDA
// wrappers so that both report the same message. Pointer-based: nvcc includes it as C++17.
#pragma once

#include <cstdint>

#include "kernels/quant_format.h"

namespace kvcheck {

// Throws InputError naming layer, head, token and channel for the first value of x
// ([tokens][head_dim]) that is NaN, ±Inf or, when fp16_zero, below -65504 (the fp16 zero point,
// the group minimum rounded down, cannot hold it). Returns otherwise.
void throw_if_unquantizable(const float* x, std::int64_t tokens, std::int64_t head_dim, const KvLocation& at,
                            const char* format, bool fp16_zero);

// Runs the CPU twin's checks of an integer-format block and throws the InputError it raises:
// the values above, or a group whose range needs a scale beyond the fp16 range. The CUDA
// wrappers call it when a kernel flags a block, so both backends report the same message.
void throw_quantize_error(const QuantSpec& spec, const float* x, std::int64_t tokens, std::int64_t head_dim,
                          const KvLocation& at);

}  // namespace kvcheck
