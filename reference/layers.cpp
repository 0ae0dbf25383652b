#include "reference/layers.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <stdexcept>

#include "reference/parallel.h"

namespace kvcheck {

namespace {

constexpr Eigen::Index kRowsPerItem = 64;

// body(t) for every row t in [0, rows), rows in items of kRowsPerItem shared among threads.
template <typename Body>
void for_rows(Eigen::Index rows, int threads, Body&& body) {
  const std::int64_t items = (rows + kRowsPerItem - 1) / kRowsPerItem;
  parallel_items(items, threads, [&](std::int64_t item, int) {
    const Eigen::Index end = std::min<Eigen::Index>(rows, (item + 1) * kRowsPerItem);
    for (Eigen::Index t = item * kRowsPerItem; t < end; ++t) body(t);
  });
}

}  // namespace

MatrixRMd rmsnorm_ref(const MatrixRMd& x, std::span<const double> weight, double eps, int threads) {
  if (static_cast<std::int64_t>(weight.size()) != x.cols()) {
    throw std::invalid_argument("rmsnorm_ref: weight size differs from hidden size");
  }
  MatrixRMd out(x.rows(), x.cols());
  for_rows(x.rows(), threads, [&](Eigen::Index t) {
    double sum_sq = 0.0;
    for (Eigen::Index i = 0; i < x.cols(); ++i) sum_sq += x(t, i) * x(t, i);
    const double inv_rms = 1.0 / std::sqrt(sum_sq / static_cast<double>(x.cols()) + eps);
    for (Eigen::Index i = 0; i < x.cols(); ++i) out(t, i) = x(t, i) * inv_rms * weight[i];
  });
  return out;
}

MatrixRMd head_rmsnorm_ref(const MatrixRMd& x, std::int64_t n_heads, std::int64_t head_dim,
                           std::span<const double> weight, double eps, int threads) {
  if (x.cols() != n_heads * head_dim) throw std::invalid_argument("head_rmsnorm_ref: x is not [T, n_heads * head_dim]");
  // Row-major [T, n_heads * d] is row-major [T * n_heads, d]: one row per (token, head).
  const Eigen::Map<const MatrixRMd> heads(x.data(), x.rows() * n_heads, head_dim);
  const MatrixRMd normed = rmsnorm_ref(heads, weight, eps, threads);
  return Eigen::Map<const MatrixRMd>(normed.data(), x.rows(), x.cols());
}

std::vector<double> rope_inv_freq(std::int64_t head_dim, double theta, const RopeScaling& scaling) {
  if (head_dim <= 0 || head_dim % 2 != 0) throw std::invalid_argument("rope_inv_freq: head_dim must be even");
  const std::int64_t half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (std::int64_t i = 0; i < half; ++i) {
    inv_freq[i] = 1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim));
  }
  if (scaling.type == RopeScaling::Type::kLlama3) {
    const double old_len = static_cast<double>(scaling.original_max_position_embeddings);
    const double low_freq_wavelen = old_len / scaling.low_freq_factor;
    const double high_freq_wavelen = old_len / scaling.high_freq_factor;
    for (double& f : inv_freq) {
      const double wavelen = 2.0 * std::numbers::pi / f;
      if (wavelen < high_freq_wavelen) continue;  // high frequencies: unchanged
      if (wavelen > low_freq_wavelen) {           // low frequencies: interpolated by `factor`
        f /= scaling.factor;
        continue;
      }
      const double smooth = (old_len / wavelen - scaling.low_freq_factor) /
                            (scaling.high_freq_factor - scaling.low_freq_factor);
      f = (1.0 - smooth) * f / scaling.factor + smooth * f;
    }
  }
  return inv_freq;
}

void rope_ref(MatrixRMd& x, std::int64_t n_heads, std::int64_t head_dim,
              std::span<const std::int64_t> positions, std::span<const double> inv_freq, int threads) {
  const std::int64_t half = head_dim / 2;
  if (x.cols() != n_heads * head_dim || static_cast<std::int64_t>(positions.size()) != x.rows() ||
      static_cast<std::int64_t>(inv_freq.size()) != half) {
    throw std::invalid_argument("rope_ref: shapes disagree");
  }
  for_rows(x.rows(), threads, [&](Eigen::Index t) {
    const double pos = static_cast<double>(positions[t]);
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = pos * inv_freq[i];
      const double c = std::cos(angle);
      const double s = std::sin(angle);
      for (std::int64_t h = 0; h < n_heads; ++h) {
        double& a = x(t, h * head_dim + i);
        double& b = x(t, h * head_dim + i + half);
        const double a0 = a;
        const double b0 = b;
        a = a0 * c - b0 * s;
        b = b0 * c + a0 * s;
      }
    }
  });
}

MatrixRMd swiglu_ref(const MatrixRMd& gate, const MatrixRMd& up, int threads) {
  if (gate.rows() != up.rows() || gate.cols() != up.cols()) {
    throw std::invalid_argument("swiglu_ref: gate and up differ in shape");
  }
  MatrixRMd out(gate.rows(), gate.cols());
  for_rows(gate.rows(), threads, [&](Eigen::Index t) {
    for (Eigen::Index i = 0; i < gate.cols(); ++i) {
      const double g = gate(t, i);
      out(t, i) = g / (1.0 + std::exp(-g)) * up(t, i);
    }
  });
  return out;
}

}  // namespace kvcheck
