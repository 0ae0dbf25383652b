#include "oracles/metrics.h"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace kvcheck {

namespace {
void check_same_size(std::span<const float> a, std::span<const float> b) {
  if (a.size() != b.size()) throw std::invalid_argument("metrics: spans differ in size");
}
}  // namespace

double nmse(std::span<const float> a, std::span<const float> ref) {
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

double max_abs_diff(std::span<const float> a, std::span<const float> ref) {
  check_same_size(a, ref);
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(ref[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::quiet_NaN();
    if (d > m) m = d;
  }
  return m;
}

}  // namespace kvcheck
