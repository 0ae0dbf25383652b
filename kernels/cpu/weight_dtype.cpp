#include "kernels/cpu/weight_dtype.h"

namespace kvcheck {

const char* weight_dtype_name(WeightDType d) {
  switch (d) {
    case WeightDType::kF32: return "F32";
    case WeightDType::kF16: return "F16";
    case WeightDType::kBF16: return "BF16";
  }
  return "?";
}

void widen_row(const std::byte* p, WeightDType dtype, std::int64_t n, float* out) {
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
      for (std::int64_t i = 0; i < n; ++i) {
        std::uint16_t bits;
        std::memcpy(&bits, p + i * 2, sizeof bits);
        out[i] = widen_f16(bits);
      }
      return;
  }
}

}  // namespace kvcheck
