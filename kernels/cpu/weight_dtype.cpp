#include "kernels/cpu/weight_dtype.h"

#include <stdexcept>
#include <string>

namespace kvcheck {

const char* weight_dtype_name(WeightDType d) {
  switch (d) {
    case WeightDType::kF32: return "F32";
    case WeightDType::kF16: return "F16";
    case WeightDType::kBF16: return "BF16";
    case WeightDType::kQ8_0: return "Q8_0";
    case WeightDType::kQ4_1: return "Q4_1";
  }
  return "?";
}

void widen_row(const std::byte* p, WeightDType dtype, std::int64_t n, float* out) {
  if (n % weight_block_elements(dtype) != 0) {
    throw std::invalid_argument(std::string("widen_row: ") + std::to_string(n) + " elements are not whole " +
                                weight_dtype_name(dtype) + " blocks");
  }
  switch (dtype) {
    case WeightDType::kF32:
      std::memcpy(out, p, static_cast<std::size_t>(n) * sizeof(float));
      return;
    case WeightDType::kBF16:
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, p + i * 2, sizeof bits);
        out[i] = widen_bf16(bits);
      }
      return;
    case WeightDType::kF16:
      for (std::int64_t i = 0; i < n; ++i) out[i] = widen_f16_at(p + i * 2);
      return;
    case WeightDType::kQ8_0:
      for (std::int64_t b = 0; b < n / 32; ++b, p += 34, out += 32) {
        const float d = widen_f16_at(p);
        for (int j = 0; j < 32; ++j) out[j] = static_cast<float>(static_cast<std::int8_t>(p[2 + j])) * d;
      }
      return;
    case WeightDType::kQ4_1:
      for (std::int64_t b = 0; b < n / 32; ++b, p += 20, out += 32) {
        const float d = widen_f16_at(p), m = widen_f16_at(p + 2);
        for (int j = 0; j < 16; ++j) {
          const auto q = static_cast<unsigned>(p[4 + j]);
          out[j] = d * static_cast<float>(q & 0x0Fu) + m;
          out[j + 16] = d * static_cast<float>(q >> 4) + m;
        }
      }
      return;
  }
}

}  // namespace kvcheck
