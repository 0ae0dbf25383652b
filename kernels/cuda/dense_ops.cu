// The model runner's dense operations on the GPU (kernels/dense_ops_cuda.h).
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "kernels/cuda/device_buffer.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/dense_ops_cuda.h"
#include "kernels/resident_cuda.h"

namespace kvcheck {
namespace {

using cuda_detail::blocks_for;
using cuda_detail::check;
using cuda_detail::DeviceBuffer;
using cuda_detail::require_device;
using cuda_detail::warp_sum;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

void check_cublas(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string("cuBLAS error in ") + what + ": status " + std::to_string(static_cast<int>(s)));
  }
}

// Warp per (row, output): lanes stride the inputs, then a fixed butterfly sum.
__global__ void __launch_bounds__(kThreads) LinearRowsKernel(CudaMatrix m, const float* x, std::int64_t rows, float* y) {
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= rows * m.rows) return;  // whole warps
  const int lane = threadIdx.x % 32;
  const std::int64_t r = item / m.rows, o = item % m.rows;
  const float* xr = x + r * m.cols;
  const float* wr = m.w + o * m.cols;
  float s = 0.0f;
  for (std::int64_t c = lane; c < m.cols; c += 32) s += wr[c] * xr[c];
  s = warp_sum(s);
  if (lane == 0) y[r * m.rows + o] = m.bias != nullptr ? s + m.bias[o] : s;
}

// out[i] = element i of `in` (bf16 or f16 bits) widened to float; exact.
__global__ void WidenKernel(const std::uint16_t* in, bool bf16, std::int64_t n, float* out) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const unsigned int bits = in[i];
  out[i] = bf16 ? __uint_as_float(bits << 16) : __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
}

__global__ void AddBiasKernel(float* y, const float* bias, std::int64_t rows, std::int64_t width) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < rows * width) y[i] += bias[i % width];
}

// Block per row: the mean square in double, then the scaled row.
__global__ void __launch_bounds__(kThreads) RmsNormKernel(const float* x, std::int64_t width, const float* weight,
                                                          double eps, float* out) {
  __shared__ double partial[kWarps];
  const float* xr = x + static_cast<std::int64_t>(blockIdx.x) * width;
  float* yr = out + static_cast<std::int64_t>(blockIdx.x) * width;
  double ss = 0.0;
  for (std::int64_t i = threadIdx.x; i < width; i += kThreads) ss += static_cast<double>(xr[i]) * xr[i];
  ss = warp_sum(ss);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
  __syncthreads();
  double total = 0.0;
  for (int w = 0; w < kWarps; ++w) total += partial[w];
  const float inv = static_cast<float>(1.0 / sqrt(total / static_cast<double>(width) + eps));
  for (std::int64_t i = threadIdx.x; i < width; i += kThreads) yr[i] = xr[i] * inv * weight[i];
}

__global__ void RopeKernel(float* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                           const std::int32_t* positions, const float* cos_table, const float* sin_table) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t item = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= rows * heads * half) return;
  const std::int64_t i = item % half, head = item / half;  // head counts (row, head) pairs
  const std::int64_t r = head / heads;
  const std::int64_t p = positions[r];
  float* v = x + head * head_dim;
  const float c = cos_table[p * half + i], s = sin_table[p * half + i];
  const float a = v[i], b = v[i + half];
  v[i] = a * c - b * s;
  v[i + half] = b * c + a * s;
}

__global__ void SwiGluKernel(float* gate, const float* up, std::int64_t n) {
  const std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  gate[i] = g / (1.0f + expf(-g)) * up[i];
}

// One handle per thread, created on first use.
cublasHandle_t cublas() {
  thread_local cublasHandle_t handle = [] {
    cublasHandle_t h = nullptr;
    check_cublas(cublasCreate(&h), "cublasCreate");
    return h;
  }();
  return handle;
}

}  // namespace

CudaMatrix upload_matrix_cuda(const void* w, CudaWeightType type, std::int64_t rows, std::int64_t cols,
                              const float* bias) {
  require_device();
  CudaMatrix m;
  m.rows = rows;
  m.cols = cols;
  const std::int64_t n = rows * cols;
  const auto bytes = static_cast<std::size_t>(n) * sizeof(float);
  check(cudaMalloc(&m.w, bytes), "cudaMalloc (weights)");
  if (type == CudaWeightType::kF32) {
    // cudaMemcpy reads the host bytes at any alignment.
    check(cudaMemcpy(m.w, w, bytes, cudaMemcpyHostToDevice), "cudaMemcpy (weights)");
  } else {
    // 16-bit elements: slices of at most 32M elements (64 MB) go up as stored and are widened
    // on the device into their place in m.w.
    constexpr std::int64_t kSlice = std::int64_t{1} << 25;
    DeviceBuffer<std::uint16_t> staging(std::min(n, kSlice));
    const auto* src = static_cast<const unsigned char*>(w);
    for (std::int64_t i0 = 0; i0 < n; i0 += kSlice) {
      const std::int64_t len = std::min(kSlice, n - i0);
      check(cudaMemcpy(staging.get(), src + i0 * 2, static_cast<std::size_t>(len) * 2, cudaMemcpyHostToDevice),
            "cudaMemcpy (weights)");
      WidenKernel<<<blocks_for(len, kThreads), kThreads>>>(staging.get(), type == CudaWeightType::kBF16, len,
                                                           m.w + i0);
      check(cudaGetLastError(), "WidenKernel launch");
    }
    check(cudaDeviceSynchronize(), "WidenKernel");
  }
  if (bias != nullptr) {
    check(cudaMalloc(&m.bias, static_cast<std::size_t>(rows) * sizeof(float)), "cudaMalloc (bias)");
    check(cudaMemcpy(m.bias, bias, static_cast<std::size_t>(rows) * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy (bias)");
  }
  return m;
}

void free_matrix_cuda(CudaMatrix& m) {
  cudaFree(m.w);
  cudaFree(m.bias);
  m = CudaMatrix{};
}

void linear_rows_cuda_device(const CudaMatrix& m, const float* x, std::int64_t rows, float* y) {
  if (rows == 0) return;
  LinearRowsKernel<<<blocks_for(rows * m.rows, kWarps), kThreads>>>(m, x, rows, y);
  check(cudaGetLastError(), "LinearRowsKernel launch");
}

void linear_rows_cuda(const CudaMatrix& m, const float* x, std::int64_t rows, float* y) {
  if (rows == 0) return;
  DeviceBuffer<float> dx(rows * m.cols), dy(rows * m.rows);
  dx.upload(x);
  linear_rows_cuda_device(m, dx.get(), rows, dy.get());
  dy.download(y);  // synchronous: waits for the kernel
}

void linear_gemm_cuda(const CudaMatrix& m, const float* x, std::int64_t rows, float* y) {
  if (rows == 0) return;
  DeviceBuffer<float> dx(rows * m.cols), dy(rows * m.rows);
  dx.upload(x);
  // Row-major Y [rows][out] = X [rows][in] Wᵀ is, column-major, Yᵀ [out][rows] = W' Xᵀ where the
  // row-major W [out][in] reads as a column-major [in][out] matrix: op(A) = Aᵀ.
  const float one = 1.0f, zero = 0.0f;
  check_cublas(cublasSgemm(cublas(), CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m.rows), static_cast<int>(rows),
                           static_cast<int>(m.cols), &one, m.w, static_cast<int>(m.cols), dx.get(),
                           static_cast<int>(m.cols), &zero, dy.get(), static_cast<int>(m.rows)),
               "cublasSgemm");
  if (m.bias != nullptr) {
    AddBiasKernel<<<blocks_for(rows * m.rows, kThreads), kThreads>>>(dy.get(), m.bias, rows, m.rows);
    check(cudaGetLastError(), "AddBiasKernel launch");
  }
  dy.download(y);
}

void rmsnorm_cuda_device(const float* x, std::int64_t rows, std::int64_t width, const float* weight, double eps,
                         float* out) {
  if (rows == 0) return;
  RmsNormKernel<<<static_cast<unsigned>(rows), kThreads>>>(x, width, weight, eps, out);
  check(cudaGetLastError(), "RmsNormKernel launch");
}

void rope_cuda_device(float* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim,
                      const std::int32_t* positions, const float* cos_table, const float* sin_table) {
  if (rows == 0) return;
  const std::int64_t half = head_dim / 2;
  RopeKernel<<<blocks_for(rows * heads * half, kThreads), kThreads>>>(x, rows, heads, head_dim, positions, cos_table,
                                                                      sin_table);
  check(cudaGetLastError(), "RopeKernel launch");
}

void swiglu_cuda_device(float* gate, const float* up, std::int64_t n) {
  if (n == 0) return;
  SwiGluKernel<<<blocks_for(n, kThreads), kThreads>>>(gate, up, n);
  check(cudaGetLastError(), "SwiGluKernel launch");
}

void rmsnorm_cuda(const float* x, std::int64_t rows, std::int64_t width, const float* weight, double eps, float* out) {
  if (rows == 0) return;
  require_device();
  DeviceBuffer<float> dx(rows * width), dw(width), dy(rows * width);
  dx.upload(x);
  dw.upload(weight);
  rmsnorm_cuda_device(dx.get(), rows, width, dw.get(), eps, dy.get());
  dy.download(out);
}

void rope_cuda(float* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, const std::int32_t* positions,
               const float* cos_table, const float* sin_table, std::int64_t table_rows) {
  if (rows == 0) return;
  require_device();
  const std::int64_t half = head_dim / 2;
  DeviceBuffer<float> dx(rows * heads * head_dim), dc(table_rows * half), ds(table_rows * half);
  DeviceBuffer<std::int32_t> dp(rows);
  dx.upload(x);
  dc.upload(cos_table);
  ds.upload(sin_table);
  dp.upload(positions);
  rope_cuda_device(dx.get(), rows, heads, head_dim, dp.get(), dc.get(), ds.get());
  dx.download(x);
}

void swiglu_cuda(float* gate, const float* up, std::int64_t n) {
  if (n == 0) return;
  require_device();
  DeviceBuffer<float> dg(n), du(n);
  dg.upload(gate);
  du.upload(up);
  swiglu_cuda_device(dg.get(), du.get(), n);
  dg.download(gate);
}

}  // namespace kvcheck
