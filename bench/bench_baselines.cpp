#include "bench/bench_baselines.h"

#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/parallel_for.h"

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

namespace kvcheck {
namespace {

template <typename F>
double best_seconds(int repeats, F&& f) {
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

}  // namespace

double copy_bandwidth_bytes_per_s() { return copy_bandwidth_bytes_per_s(1); }

double copy_bandwidth_bytes_per_s(int threads) {
  static std::mutex mutex;
  static std::map<int, double> rates;
  const std::lock_guard<std::mutex> lock(mutex);
  threads = std::max(threads, 1);
  if (const auto it = rates.find(threads); it != rates.end()) return it->second;
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  std::vector<char> a(kBytes, 1), b(kBytes, 2);
  const auto copy = [&] {
    parallel_for_chunks(threads, threads, 1, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t t = begin; t < end; ++t) {
        const std::size_t from = kBytes / static_cast<std::size_t>(threads) * static_cast<std::size_t>(t);
        const std::size_t to = t + 1 == threads ? kBytes : from + kBytes / static_cast<std::size_t>(threads);
        std::memcpy(b.data() + from, a.data() + from, to - from);
      }
    });
    asm volatile("" : : "r"(b.data()) : "memory");
  };
  copy();  // fault every page in first
  const double s = best_seconds(5, copy);
  return rates[threads] = 2.0 * static_cast<double>(kBytes) / s;
}

double eigen_gemm_flops_per_s() {
  static const double rate = [] {
    constexpr Eigen::Index kN = 1024;
    const Eigen::MatrixXf a = Eigen::MatrixXf::Random(kN, kN), b = Eigen::MatrixXf::Random(kN, kN);
    Eigen::MatrixXf c(kN, kN);
    c.noalias() = a * b;  // warm-up
    const double s = best_seconds(3, [&] {
      c.noalias() = a * b;
      asm volatile("" : : "r"(c.data()) : "memory");
    });
    return 2.0 * static_cast<double>(kN * kN * kN) / s;
  }();
  return rate;
}

double linear_rows_flops_per_s() {
  static const double rate = [] {
    constexpr std::int64_t kRows = 64, kN = 1024;
    std::vector<float> w(static_cast<std::size_t>(kN * kN)), x(static_cast<std::size_t>(kRows * kN)),
        y(static_cast<std::size_t>(kRows * kN));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
    const LinearRowsArgs args = packed_linear_args(w.data(), WeightDType::kF32, kN, kN, nullptr, x.data(), y.data(), kRows);
    linear_rows(args);  // warm-up
    const double s = best_seconds(3, [&] {
      linear_rows(args);
      asm volatile("" : : "r"(y.data()) : "memory");
    });
    return 2.0 * static_cast<double>(kRows * kN * kN) / s;
  }();
  return rate;
}

double compute_flops_per_s() { return std::max(eigen_gemm_flops_per_s(), linear_rows_flops_per_s()); }

}  // namespace kvcheck
