// Float constants of the kernels' error bounds, shared by the CPU and GPU properties.
#pragma once

namespace kvcheck::testing {

inline constexpr double kFloatEps = 0x1.0p-24;        // unit roundoff of float
inline constexpr double kProbUnderflow = 0x1.0p-120;  // float exp(l - m) underflows below 2^-126

}  // namespace kvcheck::testing
