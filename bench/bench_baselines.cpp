#include "bench/bench_baselines.h"

#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/parallel_for.h"
#include "reference/dot_rows.h"

#include <Eigen/Core>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>
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

// One baseline's rate per thread count, measured the first time it is asked for (under the lock,
// so two callers never measure at once) and kept for the process.
class RateCache {
 public:
  template <typename Measure>
  double get(int threads, Measure&& measure) {
    const std::lock_guard<std::mutex> lock(mutex_);
    threads = std::max(threads, 1);
    if (const auto it = rates_.find(threads); it != rates_.end()) return it->second;
    return rates_[threads] = measure(threads);
  }

 private:
  std::mutex mutex_;
  std::map<int, double> rates_;
};

double measure_copy(int threads) {
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
  return 2.0 * static_cast<double>(kBytes) / best_seconds(5, copy);
}

}  // namespace

double copy_bandwidth_bytes_per_s() { return copy_bandwidth_bytes_per_s(1); }

double copy_bandwidth_bytes_per_s(int threads) {
  static RateCache rates;
  return rates.get(threads, measure_copy);
}

namespace {

// `threads` copies of one kernel run at once, each on its own operands and thread (as the
// engine's threads each work on their own rows of a weight), started together; each copy's best
// of `repeats` rounds, its FLOPs over that time, summed over the copies. The threads are made
// before the clock starts, and one slow round on a shared machine says little where the best of
// many says what the cores give when they are the run's. make() builds one copy's state and
// returns the callable that runs it once.
template <typename Make>
double concurrent_flops_per_s(int threads, int repeats, double flops_per_run, Make&& make) {
  threads = std::max(threads, 1);
  std::vector<decltype(make())> runs;
  for (int t = 0; t < threads; ++t) runs.push_back(make());
  std::vector<double> best(static_cast<std::size_t>(threads));
  std::atomic<int> ready{0};
  const auto work = [&](int t) {
    auto& run = runs[static_cast<std::size_t>(t)];
    run();  // warm-up
    ready.fetch_add(1);
    while (ready.load() < threads) {
    }
    best[static_cast<std::size_t>(t)] = best_seconds(repeats, run);
  };
  std::vector<std::thread> others;
  for (int t = 1; t < threads; ++t) others.emplace_back(work, t);
  work(0);
  for (std::thread& th : others) th.join();
  double rate = 0.0;
  for (const double b : best) rate += flops_per_run / b;
  return rate;
}

// The operands of the two compute rates.
constexpr Eigen::Index kGemmN = 1024;
constexpr std::int64_t kLinearRows = 64, kLinearN = 1024;

}  // namespace

double eigen_gemm_flops_per_s() { return eigen_gemm_flops_per_s(1); }

double eigen_gemm_flops_per_s(int threads) {
  static RateCache rates;
  return rates.get(threads, [](int t) {
    return concurrent_flops_per_s(t, 5, 2.0 * static_cast<double>(kGemmN * kGemmN * kGemmN), [] {
      struct Run {
        Eigen::MatrixXf a, b, c;
        void operator()() {
          c.noalias() = a * b;
          asm volatile("" : : "r"(c.data()) : "memory");
        }
      };
      return Run{Eigen::MatrixXf::Random(kGemmN, kGemmN), Eigen::MatrixXf::Random(kGemmN, kGemmN),
                 Eigen::MatrixXf(kGemmN, kGemmN)};
    });
  });
}

double eigen_gemm_double_flops_per_s(int threads) {
  static RateCache rates;
  return rates.get(threads, [](int t) {
    return concurrent_flops_per_s(t, 5, 2.0 * static_cast<double>(kGemmN * kGemmN * kGemmN), [] {
      struct Run {
        Eigen::MatrixXd a, b, c;
        void operator()() {
          c.noalias() = a * b;
          asm volatile("" : : "r"(c.data()) : "memory");
        }
      };
      return Run{Eigen::MatrixXd::Random(kGemmN, kGemmN), Eigen::MatrixXd::Random(kGemmN, kGemmN),
                 Eigen::MatrixXd(kGemmN, kGemmN)};
    });
  });
}

double dot_rows_flops_per_s(int threads) {
  static RateCache rates;
  return rates.get(threads, [](int t) {
    return concurrent_flops_per_s(t, 5, 2.0 * static_cast<double>(kGemmN * kGemmN * kGemmN), [] {
      struct Run {
        MatrixRMd x, w, y;
        void operator()() {
          dot_rows(x, w, y);
          asm volatile("" : : "r"(y.data()) : "memory");
        }
      };
      return Run{MatrixRMd::Random(kGemmN, kGemmN), MatrixRMd::Random(kGemmN, kGemmN), MatrixRMd(kGemmN, kGemmN)};
    });
  });
}

double reference_compute_flops_per_s(int threads) {
  return std::max(eigen_gemm_double_flops_per_s(threads), dot_rows_flops_per_s(threads));
}

double linear_rows_flops_per_s() { return linear_rows_flops_per_s(1); }

double linear_rows_flops_per_s(int threads) {
  static RateCache rates;
  return rates.get(threads, [](int t) {
    return concurrent_flops_per_s(t, 20, 2.0 * static_cast<double>(kLinearRows * kLinearN * kLinearN), [] {
      struct Run {
        std::vector<float> w, x, y;
        void operator()() {
          linear_rows(packed_linear_args(w.data(), WeightDType::kF32, kLinearN, kLinearN, nullptr, x.data(), y.data(),
                                         kLinearRows));
          asm volatile("" : : "r"(y.data()) : "memory");
        }
      };
      Run r{std::vector<float>(static_cast<std::size_t>(kLinearN * kLinearN)),
            std::vector<float>(static_cast<std::size_t>(kLinearRows * kLinearN)),
            std::vector<float>(static_cast<std::size_t>(kLinearRows * kLinearN))};
      for (std::size_t i = 0; i < r.w.size(); ++i) r.w[i] = static_cast<float>(i % 7) * 0.25f - 0.75f;
      for (std::size_t i = 0; i < r.x.size(); ++i) r.x[i] = static_cast<float>(i % 5) * 0.5f - 1.0f;
      return r;
    });
  });
}

double compute_flops_per_s() { return compute_flops_per_s(1); }

double compute_flops_per_s(int threads) {
  return std::max(eigen_gemm_flops_per_s(threads), linear_rows_flops_per_s(threads));
}

}  // namespace kvcheck
