#include "oracles/metrics.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace kvcheck {

namespace {

template <typename T>
void check_same_size(std::span<const T> a, std::span<const T> b) {
  if (a.size() != b.size()) throw std::invalid_argument("metrics: spans differ in size");
}

template <typename T>
double nmse_impl(std::span<const T> a, std::span<const T> ref) {
  check_same_size(a, ref);
  double err = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(ref[i]);
    err += d * d;
    norm += static_cast<double>(ref[i]) * static_cast<double>(ref[i]);
  }
  if (std::isnan(err) || std::isnan(norm)) return std::numeric_limits<double>::quiet_NaN();
  if (norm == 0.0) return err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return err / norm;
}

template <typename T>
double max_abs_diff_impl(std::span<const T> a, std::span<const T> ref) {
  check_same_size(a, ref);
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(ref[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    if (d > m) m = d;
  }
  return m;
}

}  // namespace

double nmse(std::span<const float> a, std::span<const float> ref) { return nmse_impl(a, ref); }
double nmse(std::span<const double> a, std::span<const double> ref) { return nmse_impl(a, ref); }
double max_abs_diff(std::span<const float> a, std::span<const float> ref) { return max_abs_diff_impl(a, ref); }
double max_abs_diff(std::span<const double> a, std::span<const double> ref) { return max_abs_diff_impl(a, ref); }

}  // namespace kvcheck
