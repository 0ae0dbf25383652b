#include "optimized/cpu_backend.h"

#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/ThreadPool>

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "kernels/cpu/dense_ops.h"

namespace kvcheck {
namespace {

// Output rows of W per task of `linear`: fixed, so the split never depends on threads or batch.
// (256 at a batch of 16 gained 5% on the lm_head and lost as much on the layers' projections,
// whose 896 or 4,864 outputs then split unevenly over two cores.)
constexpr std::int64_t kLinearChunk = 64;
// Elements of `swiglu` per task, and the work of one (an exp costs about as much as 32
// multiply-adds here), for parallel()'s threshold.
constexpr std::int64_t kSwigluChunk = 8192;
constexpr std::int64_t kSwigluWorkPerElement = 32;
// parallel()'s work for `linear` counts each weight element as this many rows' multiply-adds
// besides the batch's own: at a small batch the step streams the weights from memory, and an
// element's 2 or 4 bytes take about as long as 4 multiply-adds, so a 896 x 896 projection at
// batch 1 (1.6 MB of bf16) is worth both cores while a 128 x 896 one is not.
constexpr std::int64_t kWeightReadRows = 4;
// Batch rows per task of `linear`: each weight row is read once per block.
constexpr std::int64_t kLinearRowBlock = 16;

void check_size(std::size_t got, std::int64_t want, const char* what) {
  if (static_cast<std::int64_t>(got) != want) {
    throw std::invalid_argument(std::string("cpu backend: ") + what + " has the wrong size");
  }
}

// The decode projection's arguments for outputs [out_begin, out_end) of rows [r0, r0 + n).
LinearRowsArgs linear_args(const DenseWeight& w, std::span<const float> x, std::int64_t r0, std::int64_t n,
                           std::span<float> y, std::int64_t out_begin, std::int64_t out_end) {
  // W as stored: the kernels widen bf16 / f16 in their inner loops.
  LinearRowsArgs args = packed_linear_args(w.w.data, w.w.dtype, w.in(), w.out(), w.bias.empty() ? nullptr : w.bias.data(),
                                           x.data() + r0 * w.in(), y.data() + r0 * w.out(), n);
  args.out_begin = out_begin;
  args.out_end = out_end;
  return args;
}

}  // namespace

struct CpuBackend::Pool {
  explicit Pool(int workers) : pool(workers) {}
  Eigen::ThreadPool pool;
};

CpuBackend::CpuBackend(int threads)
    : threads_(threads > 0 ? threads : std::max(1, static_cast<int>(std::thread::hardware_concurrency()))) {
  if (threads_ > 1) pool_ = std::make_unique<Pool>(threads_ - 1);
}

CpuBackend::~CpuBackend() = default;

void CpuBackend::parallel(std::int64_t n, const std::function<void(std::int64_t)>& task, std::int64_t work) {
  if (n <= 0) return;
  constexpr std::int64_t kMinParallelWork = std::int64_t{1} << 21;
  if (!pool_ || n == 1 || work < kMinParallelWork) {
    for (std::int64_t i = 0; i < n; ++i) task(i);
    return;
  }
  // Workers pull task indices from a shared counter; each index runs exactly once, and what a
  // task writes is disjoint from the others, so the result does not depend on scheduling.
  std::atomic<std::int64_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto drain = [&] {
    for (std::int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) {
      try {
        task(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
  };
  const int helpers = static_cast<int>(std::min<std::int64_t>(threads_ - 1, n - 1));
  Eigen::Barrier done(static_cast<unsigned>(helpers));
  for (int h = 0; h < helpers; ++h) {
    pool_->pool.Schedule([&] {
      drain();
      done.Notify();
    });
  }
  drain();
  done.Wait();
  if (error) std::rethrow_exception(error);
}

void CpuBackend::linear(const DenseWeight& w, std::span<const float> x, std::int64_t rows, std::span<float> y) {
  const std::int64_t in = w.in();
  const std::int64_t out = w.out();
  check_size(x.size(), rows * in, "linear input");
  check_size(y.size(), rows * out, "linear output");
  // Tasks are (64 outputs) x (16 rows) tiles; kernels/cpu/dense_ops.h computes every element
  // in an order fixed by its own row, so neither the tiling nor the thread count shows in a bit.
  // Consecutive tasks are a chunk's row blocks, so a batch over 16 rows takes a chunk's weights
  // (64 rows of W) from memory once and from cache for its other blocks: W is read once per call.
  const std::int64_t chunks = (out + kLinearChunk - 1) / kLinearChunk;
  const std::int64_t blocks = (rows + kLinearRowBlock - 1) / kLinearRowBlock;
  parallel(blocks * chunks, [&](std::int64_t task) {
    const std::int64_t r0 = (task % blocks) * kLinearRowBlock;
    const std::int64_t a = (task / blocks) * kLinearChunk;
    linear_rows(linear_args(w, x, r0, std::min(kLinearRowBlock, rows - r0), y, a, std::min(a + kLinearChunk, out)));
  }, (rows + kWeightReadRows) * out * in);
}

void CpuBackend::linear_prefill(const DenseWeight& w, std::span<const float> x, std::int64_t rows,
                                std::span<float> y) {
  // The batch-invariant kernel: at the CPU's ISA it outruns Eigen's GEMM built for baseline
  // x86-64 (kvcheck_bench_attention: BM_LinearRows/32/4096/4096 39 GFLOP/s against BM_EigenGemm
  // 18 on one core of the 2.5 GHz Xeon), and a prompt's rows get the bits a decode step gives them.
  linear(w, x, rows, y);
}

void CpuBackend::rmsnorm(std::span<const float> x, std::int64_t rows, std::span<const float> weight, double eps,
                         std::span<float> out) {
  const auto width = static_cast<std::int64_t>(weight.size());
  check_size(x.size(), rows * width, "rmsnorm input");
  check_size(out.size(), rows * width, "rmsnorm output");
  kvcheck::rmsnorm(x.data(), rows, width, weight.data(), eps, out.data());
}

void CpuBackend::rope(std::span<float> x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                      std::span<const std::int32_t> positions, std::span<const float> cos_table,
                      std::span<const float> sin_table) {
  const std::int64_t half = head_dim / 2;
  check_size(x.size(), rows * heads * head_dim, "rope input");
  check_size(positions.size(), rows, "rope positions");
  check_size(sin_table.size(), static_cast<std::int64_t>(cos_table.size()), "rope sin table");
  const std::int64_t table_rows = half > 0 ? static_cast<std::int64_t>(cos_table.size()) / half : 0;
  kvcheck::rope(x.data(), rows, heads, head_dim, positions.data(), cos_table.data(), sin_table.data(), table_rows);
}

void CpuBackend::swiglu(std::span<float> gate, std::span<const float> up) {
  check_size(up.size(), static_cast<std::int64_t>(gate.size()), "swiglu up");
  // Element by element, so any split gives the same bits.
  const auto n = static_cast<std::int64_t>(gate.size());
  parallel((n + kSwigluChunk - 1) / kSwigluChunk, [&](std::int64_t task) {
    const std::int64_t i = task * kSwigluChunk;
    kvcheck::swiglu(gate.data() + i, up.data() + i, std::min(kSwigluChunk, n - i));
  }, n * kSwigluWorkPerElement);
}

void CpuBackend::prefill_attention(const PrefillAttentionInput& in, const PrefillAttentionOutput& out) {
  PrefillAttentionInput with_threads = in;
  with_threads.threads = threads_;
  kvcheck::prefill_attention(with_threads, out);
}

void CpuBackend::decode_attention(std::span<const DecodeHeadInput> in, std::span<const DecodeHeadOutput> out) {
  check_size(out.size(), static_cast<std::int64_t>(in.size()), "decode attention outputs");
  // Work: every head reads its slots' keys and values once per query head.
  std::int64_t work = 0;
  for (const DecodeHeadInput& h : in) work += decode_slots(h) * h.head_dim * h.group * 2;
  parallel(static_cast<std::int64_t>(in.size()), [&](std::int64_t i) {
    paged_decode_attention(in[static_cast<std::size_t>(i)], out[static_cast<std::size_t>(i)]);
  }, work);
}

}  // namespace kvcheck
