// Distances between a result and the value it is held against.
#pragma once

#include <span>

namespace kvcheck {

// Normalised mean squared error ||a - ref||^2 / ||ref||^2, accumulated in double.
// 0 when both are all zeros; +inf when ref is all zeros and a is not; NaN if either holds a NaN.
double nmse(std::span<const float> a, std::span<const float> ref);
double nmse(std::span<const double> a, std::span<const double> ref);
// max_i |a_i - ref_i|; NaN if either holds a NaN.
double max_abs_diff(std::span<const float> a, std::span<const float> ref);
double max_abs_diff(std::span<const double> a, std::span<const double> ref);

}  // namespace kvcheck
