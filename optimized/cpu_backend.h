// The CPU backend: the kernels/cpu twins (dense_ops for the projections, norms, RoPE and SwiGLU;
// the attention twins), split into tasks on one persistent Eigen::ThreadPool so that the two
// cores of a CI machine share every step without spawning threads per operation (and without
// oversubscription: Eigen's own GEMM threading is not used, every parallel section goes through
// this pool).
//
// Work is split into fixed-size chunks that do not depend on the thread count or the batch, so
// results are bit-identical for 1 or N threads and for any batch composition.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "optimized/backend.h"

namespace kvcheck {

class CpuBackend final : public Backend {
 public:
  // threads <= 0: std::thread::hardware_concurrency().
  explicit CpuBackend(int threads = 0);
  ~CpuBackend() override;
  std::string name() const override { return "cpu"; }
  int threads() const override { return threads_; }

  void linear(const DenseWeight& w, std::span<const float> x, std::int64_t rows, std::span<float> y) override;
  void linear_prefill(const DenseWeight& w, std::span<const float> x, std::int64_t rows,
                      std::span<float> y) override;
  void rmsnorm(std::span<const float> x, std::int64_t rows, std::span<const float> weight, double eps,
               std::span<float> out) override;
  void rope(std::span<float> x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
            std::span<const std::int32_t> positions, std::span<const float> cos_table,
            std::span<const float> sin_table) override;
  void swiglu(std::span<float> gate, std::span<const float> up) override;
  void prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) override;
  void decode_attention(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out) override;

  // Runs task(i) for i in [0, n) on the pool (the caller takes part); rethrows the first error.
  // `work` estimates the multiply-adds of all tasks together: below about 2M the handoff to the
  // pool costs more than it saves, and the tasks run on the caller (same chunks, same results).
  void parallel(std::int64_t n, const std::function<void(std::int64_t)>& task, std::int64_t work = INT64_MAX);

 private:
  struct Pool;  // an Eigen::ThreadPool of threads - 1 workers (the caller is the last thread)
  int threads_;
  std::unique_ptr<Pool> pool_;
};

}  // namespace kvcheck
