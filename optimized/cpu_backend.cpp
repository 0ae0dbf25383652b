#include "optimized/cpu_backend.h"

#define EIGEN_USE_THREADS
#include <unsupported/Eigen/CXX11/ThreadPool>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "kernels/cpu/dense_ops.h"

namespace kvcheck {
namespace {

// Output rows of W per task of `linear`: fixed, so the split never depends on threads or batch.
constexpr std::int64_t kLinearChunk = 64;
// Batch rows per task of `linear`: each weight row is read once per block.
constexpr std::int64_t kLinearRowBlock = 16;
// Output columns per GEMM of `linear_prefill`.
constexpr std::int64_t kPrefillChunk = 256;

void check_size(std::size_t got, std::int64_t want, const char* what) {
  if (static_cast<std::int64_t>(got) != want) {
    throw std::invalid_argument(std::string("cpu backend: ") + what + " has the wrong size");
  }
}

using ConstRowsMap = Eigen::Map<const MatrixRMf>;
using RowsMap = Eigen::Map<MatrixRMf>;

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
  const std::int64_t chunks = (out + kLinearChunk - 1) / kLinearChunk;
  const std::int64_t blocks = (rows + kLinearRowBlock - 1) / kLinearRowBlock;
  parallel(blocks * chunks, [&](std::int64_t task) {
    const std::int64_t r0 = (task / chunks) * kLinearRowBlock;
    const std::int64_t a = (task % chunks) * kLinearChunk;
    LinearRowsArgs args;
    args.w = w.w.data;  // as stored: linear_rows widens bf16 / f16 in its inner loop
    args.w_dtype = w.w.dtype;
    args.w_stride = in;
    args.in = in;
    args.bias = w.bias.empty() ? nullptr : w.bias.data();
    args.x = x.data() + r0 * in;
    args.x_stride = in;
    args.y = y.data() + r0 * out;
    args.y_stride = out;
    args.rows = std::min(kLinearRowBlock, rows - r0);
    args.out_begin = a;
    args.out_end = std::min(a + kLinearChunk, out);
    linear_rows(args);
  }, rows * out * in);
}

void CpuBackend::linear_prefill(const DenseWeight& w, std::span<const float> x, std::int64_t rows,
                                std::span<float> y) {
  const std::int64_t in = w.in();
  const std::int64_t out = w.out();
  check_size(x.size(), rows * in, "linear input");
  check_size(y.size(), rows * out, "linear output");
  ConstRowsMap xm(x.data(), rows, in);
  RowsMap ym(y.data(), rows, out);
  const std::int64_t chunks = (out + kPrefillChunk - 1) / kPrefillChunk;
  parallel(chunks, [&](std::int64_t c) {
    const std::int64_t a = c * kPrefillChunk;
    const std::int64_t n = std::min(kPrefillChunk, out - a);
    // The chunk's weight rows widened to float (exact) into an aligned buffer, then the GEMM a
    // float32 copy of W got: the same expression type (a row block of a float matrix), strides
    // and alignment, so the same blocking and the same bits.
    thread_local MatrixRMf wf;
    wf.resize(n, in);
    w.w.widen_rows_to(a, n, wf.data());
    ym.middleCols(a, n).noalias() = xm * wf.topRows(n).transpose();
    if (!w.bias.empty()) {
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t i = 0; i < n; ++i) ym(r, a + i) += w.bias[static_cast<std::size_t>(a + i)];
      }
    }
  });
}

void CpuBackend::rmsnorm(std::span<const float> x, std::int64_t rows, std::span<const float> weight, double eps,
                         std::span<float> out) {
  const std::int64_t h = static_cast<std::int64_t>(weight.size());
  check_size(x.size(), rows * h, "rmsnorm input");
  check_size(out.size(), rows * h, "rmsnorm output");
  for (std::int64_t r = 0; r < rows; ++r) {
    // The mean square in double: one pass, deterministic per row, as exact as it is cheap.
    double ss = 0.0;
    for (std::int64_t i = 0; i < h; ++i) {
      const double v = x[static_cast<std::size_t>(r * h + i)];
      ss += v * v;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(h) + eps));
    for (std::int64_t i = 0; i < h; ++i) {
      const std::size_t k = static_cast<std::size_t>(r * h + i);
      out[k] = x[k] * inv * weight[static_cast<std::size_t>(i)];
    }
  }
}

void CpuBackend::rope(std::span<float> x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                      std::span<const std::int32_t> positions, std::span<const float> cos_table,
                      std::span<const float> sin_table) {
  const std::int64_t half = head_dim / 2;
  check_size(x.size(), rows * heads * head_dim, "rope input");
  check_size(positions.size(), rows, "rope positions");
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t p = positions[static_cast<std::size_t>(r)];
    if (p < 0 || (p + 1) * half > static_cast<std::int64_t>(cos_table.size())) {
      throw std::invalid_argument("cpu backend: rope position outside the table");
    }
    const float* c = cos_table.data() + p * half;
    const float* s = sin_table.data() + p * half;
    for (std::int64_t hd = 0; hd < heads; ++hd) {
      float* v = x.data() + (r * heads + hd) * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void CpuBackend::swiglu(std::span<float> gate, std::span<const float> up) {
  check_size(up.size(), static_cast<std::int64_t>(gate.size()), "swiglu up");
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
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
