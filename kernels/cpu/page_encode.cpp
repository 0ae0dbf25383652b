#include "kernels/cpu/page_encode.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/quantize.h"
#include "kernels/quant_math.h"

namespace kvcheck {
namespace {

constexpr std::int64_t kPairBytes = 4;  // fp16 scale, fp16 zero

// Interleaves the quantizer's separate scale and zero arrays into (scale, zero) pairs.
void interleave(std::span<const std::uint16_t> scales, std::span<const std::uint16_t> zeros, std::uint8_t* out) {
  for (std::size_t i = 0; i < scales.size(); ++i) {
    std::memcpy(out + i * kPairBytes, &scales[i], 2);
    std::memcpy(out + i * kPairBytes + 2, &zeros[i], 2);
  }
}

void split(const std::uint8_t* pairs, std::size_t n, std::vector<std::uint16_t>& scales,
           std::vector<std::uint16_t>& zeros) {
  scales.resize(n);
  zeros.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::memcpy(&scales[i], pairs + i * kPairBytes, 2);
    std::memcpy(&zeros[i], pairs + i * kPairBytes + 2, 2);
  }
}

}  // namespace

EncodedBlock encode_block(const KvFormat& format, std::span<const float> x, std::int64_t rows, std::int64_t head_dim,
                          const KvLocation& at, float fp8_scale) {
  const std::int64_t d = head_dim;
  if (rows < 0 || static_cast<std::int64_t>(x.size()) != rows * d) {
    throw std::invalid_argument(fmt::format("encode_block: {} values for {} rows of {}", x.size(), rows, d));
  }
  const FormatBytes fb = format_bytes(format, d);
  EncodedBlock b;
  b.rows = rows;
  b.row_bytes = fb.code_bytes_per_token;
  b.group_tokens = fb.tokens_per_unit;
  if (rows % b.group_tokens != 0) {
    throw std::invalid_argument(fmt::format("encode_block: {} rows of {} are not whole groups of {}", rows,
                                            kv_format_name(format), b.group_tokens));
  }
  b.codes.resize(static_cast<std::size_t>(rows * b.row_bytes));
  switch (format.dtype) {
    case KvDType::kFp32:
      std::memcpy(b.codes.data(), x.data(), x.size() * sizeof(float));
      return b;
    case KvDType::kFp16:
      for (std::size_t i = 0; i < x.size(); ++i) {
        const std::uint16_t h = quant::f16_from_float(x[i]);
        std::memcpy(b.codes.data() + 2 * i, &h, 2);
      }
      return b;
    case KvDType::kFp8E4M3: {
      if (fp8_scale > 0.0f) {
        quantize_fp8_e4m3_with_scale(x, rows, d, fp8_scale, at, b.codes);
        b.fp8_scale = fp8_scale;
      } else {
        b.fp8_scale = quantize_fp8_e4m3(x, rows, d, at, b.codes);
      }
      b.slot_meta_bytes = sizeof(float);
      b.slot_meta.resize(static_cast<std::size_t>(rows) * sizeof(float));
      for (std::int64_t i = 0; i < rows; ++i) std::memcpy(b.slot_meta.data() + i * 4, &b.fp8_scale, 4);
      return b;
    }
    case KvDType::kInt: {
      const QuantSpec& spec = format.spec;
      const auto pairs = static_cast<std::size_t>(spec.meta_count(rows, d));
      std::vector<std::uint16_t> scales(pairs), zeros(pairs);
      quantize(spec, x, rows, d, at, b.codes, scales, zeros);
      std::vector<std::uint8_t> interleaved(pairs * kPairBytes);
      interleave(scales, zeros, interleaved.data());
      if (spec.granularity == Granularity::kPerChannel) {
        b.group_meta_bytes = d * kPairBytes;
        b.group_meta = std::move(interleaved);  // [rows / G][head_dim] pairs
      } else {
        b.slot_meta_bytes = fb.meta_bytes_per_unit;
        b.slot_meta = std::move(interleaved);   // [rows][pairs per token]
      }
      return b;
    }
  }
  throw std::logic_error("encode_block: unknown format");
}

std::vector<float> decode_block(const KvFormat& format, const EncodedBlock& b, std::int64_t head_dim) {
  const std::int64_t d = head_dim;
  std::vector<float> out(static_cast<std::size_t>(b.rows * d));
  switch (format.dtype) {
    case KvDType::kFp32:
      std::memcpy(out.data(), b.codes.data(), out.size() * sizeof(float));
      return out;
    case KvDType::kFp16:
      for (std::size_t i = 0; i < out.size(); ++i) {
        std::uint16_t h = 0;
        std::memcpy(&h, b.codes.data() + 2 * i, 2);
        out[i] = quant::f16_to_float(h);
      }
      return out;
    case KvDType::kFp8E4M3:
      dequantize_fp8_e4m3(b.codes, b.fp8_scale, out);
      return out;
    case KvDType::kInt: {
      const QuantSpec& spec = format.spec;
      const std::vector<std::uint8_t>& pairs = spec.granularity == Granularity::kPerChannel ? b.group_meta : b.slot_meta;
      std::vector<std::uint16_t> scales, zeros;
      split(pairs.data(), pairs.size() / kPairBytes, scales, zeros);
      dequantize(spec, b.codes, scales, zeros, b.rows, d, out);
      return out;
    }
  }
  throw std::logic_error("decode_block: unknown format");
}

}  // namespace kvcheck
