// Dequantization of ggml's block formats to float32, bit for bit what the `gguf` Python package's
// gguf.quants.dequantize computes (every intermediate rounded to float32 in the same order, no
// fused multiply-add), so the PyPI package is the known-answer oracle (datasets/gguf/).
//
// Readable: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K. Block layouts, in
// bytes (d, m, dmin: f16 scales; qs: packed codes; qh: the codes' high bits):
//   Q8_0  32 elems / 34 B: d, i8 qs[32]                              x = q * d
//   Q4_0  32 / 18: d, qs[16] (low nibbles: elems 0-15, high: 16-31)  x = d * (q - 8)
//   Q4_1  32 / 20: d, m, qs[16]                                      x = (d * q) + m
//   Q5_0  32 / 22: d, u32 qh (bit j: elem j), qs[16]                 x = d * (q - 16)
//   Q5_1  32 / 24: d, m, u32 qh, qs[16]                              x = (d * q) + m
//   Q4_K  256 / 144: d, dmin, 12 B of 6-bit scales and mins for 8 sub-blocks of 32, qs[128]
//         (32-byte chunk c: low nibbles sub-block 2c, high 2c+1)   x = (d * sc) * q - (dmin * mn)
//   Q5_K  256 / 176: as Q4_K plus qh[32] before qs (bit j of qh[i]: sub-block j, elem i)
//   Q6_K  256 / 210: ql[128], qh[64], i8 scales[16] (one per 16 elems), d last
//                                                                    x = (d * scale) * (q - 32)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvcheck {

// Whether dequantize_ggml reads `type` (a ggml type id).
bool ggml_type_readable(std::uint32_t type);

// Dequantizes out.size() elements (a whole number of the type's blocks) from `bytes` (exactly
// their blocks). std::invalid_argument for an unreadable type or sizes that disagree; callers
// check the type first and name the tensor.
void dequantize_ggml(std::uint32_t type, std::span<const std::byte> bytes, std::span<float> out);

}  // namespace kvcheck
