// The model runner's dense operations on the GPU (optimized/cuda_backend.h uses them): projections
// through a row-invariant warp-per-output kernel (decode) or cuBLAS SGEMM (a prompt), RMSNorm,
// RoPE and SwiGLU, with the CPU backend's semantics (optimized/backend.h). C++17: nvcc compiles
// this header. Host pointers in and out: each call copies its activations to the device and back;
// weights are uploaded once (CudaMatrix). std::runtime_error without a CUDA build or device.
#pragma once

#include <cstdint>

namespace kvcheck {

// A weight matrix W [rows = out][cols = in], row-major, and its bias (or null), on the device.
struct CudaMatrix {
  float* w = nullptr;
  float* bias = nullptr;
  std::int64_t rows = 0, cols = 0;
};
// How the host weight bytes are stored (kernels/cpu/weight_dtype.h's WeightDType, which this
// C++17 header cannot include).
enum class CudaWeightType : std::uint8_t { kF32, kF16, kBF16 };
// Uploads W as stored on the host: `w` points to rows * cols little-endian elements of `type`,
// row-major, at any byte alignment (the mmapped checkpoint). The bytes go up as they are, in
// slices, and a kernel widens each slice into the float matrix on the device (exact for bf16 and
// f16), so the host never holds a float copy; the device holds float32, which cuBLAS SGEMM and
// the warp-per-output kernel read.
CudaMatrix upload_matrix_cuda(const void* w, CudaWeightType type, std::int64_t rows, std::int64_t cols,
                              const float* bias);
void free_matrix_cuda(CudaMatrix& m);

// y[r] = W x[r] (+ b), x: [rows][cols], y: [rows][W.rows]. Every output is one warp's dot product
// in a fixed order, so a row's result does not depend on the row count (the backend's batch
// invariance).
void linear_rows_cuda(const CudaMatrix& m, const float* x, std::int64_t rows, float* y);
// The same through cuBLAS SGEMM (fp32 operands and accumulation): one prompt's rows.
void linear_gemm_cuda(const CudaMatrix& m, const float* x, std::int64_t rows, float* y);
// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight (the mean square in double, as the CPU). One
// block per row: the hidden-state norms (rows = tokens) and Qwen3's per-head q/k norms (rows =
// tokens x heads, width head_dim).
void rmsnorm_cuda(const float* x, std::int64_t rows, std::int64_t width, const float* weight, double eps, float* out);
// Rotate-half RoPE in place; cos / sin tables [positions][head_dim / 2], table_rows of them.
void rope_cuda(float* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, const std::int32_t* positions,
               const float* cos_table, const float* sin_table, std::int64_t table_rows);
// gate[i] = silu(gate[i]) * up[i].
void swiglu_cuda(float* gate, const float* up, std::int64_t n);

}  // namespace kvcheck
