// The model runner's dense operations on the CPU, twins of kernels/cuda/dense_ops.cu
// (kernels/dense_ops_cuda.h) with the same arguments: the decode projection linear_rows, the
// prompt projection linear_gemm, RMSNorm, RoPE and SwiGLU. optimized/cpu_backend.h splits them
// into tasks for its thread pool and forwards; nothing here depends on how they are split.
//
// linear_rows: y[r] = W x[r] (+ b) for a batch of rows, with a reduction order that depends on
// nothing but the row itself.
//
// Every output element equals row_ops::dot(W[o], x[r], in) (+ bias[o]) bit for bit: eight lane
// sums over k = l, l + 8, ... in increasing k, combined as ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)),
// plus the tail k >= 8*floor(in/8) summed separately. So a request's logits do not depend on the
// batch it shares a step with, nor on the tile a thread happens to own. What the tiling buys is
// reuse: each weight row is loaded once per block of rows instead of once per row.
//
// W is read as the checkpoint stores it (F32, F16, BF16, or a GGUF file's Q8_0 / Q4_1 blocks;
// kernels/cpu/weight_dtype.h) and each element is widened to float inside the inner loop. The
// widening is exact (for the blocks: the dequantization's own float operations), so such a W
// gives bit for bit what the same W converted to a float32 matrix first would give; a Q4_1 W
// streams 5/32 of that matrix's bytes per decode step.
//
// On x86-64 the loop is compiled three times, for the baseline ISA, for AVX2 + F16C and for
// AVX-512, and the widest build the CPU runs is used. All perform the same multiplies and adds
// lane for lane (no FMA; kernels/ builds with -ffp-contract=off; the AVX-512 build puts two output
// rows' eight lanes side by side in one register) and the same exact widening (F16C's vcvtph2ps,
// or a scalar conversion), so the choice never changes a bit.
#pragma once

#include <cstdint>

#include "kernels/cpu/weight_dtype.h"

namespace kvcheck {

// kAvx2: AVX2 and F16C; kAvx512: those and AVX-512 F, VL, BW, DQ. Ordered narrowest first.
enum class LinearIsa { kPortable, kAvx2, kAvx512 };

// The ISA linear_rows uses on this CPU: the widest it has, or at most KVCHECK_ISA (portable, avx2,
// avx512) where that environment variable is set; an unknown name throws std::invalid_argument.
LinearIsa linear_rows_isa();
const char* linear_isa_name(LinearIsa isa);
// Whether `isa` can run on this CPU.
bool linear_isa_available(LinearIsa isa);

struct LinearRowsArgs {
  const void* w = nullptr;     // [out, in] row-major elements of w_dtype, `w_stride` elements between
  std::int64_t w_stride = 0;   // rows (whole blocks for Q8_0 / Q4_1); any byte alignment (memcpy)
  std::int64_t in = 0;
  const float* bias = nullptr;  // [out] or null
  const float* x = nullptr;     // [rows, in], `x_stride` floats between rows
  std::int64_t x_stride = 0;
  float* y = nullptr;           // [rows, out], `y_stride` floats between rows
  std::int64_t y_stride = 0;
  std::int64_t rows = 0;
  std::int64_t out_begin = 0;   // computes outputs [out_begin, out_end) of every row
  std::int64_t out_end = 0;
  WeightDType w_dtype = WeightDType::kF32;  // last, so that positional initializers stay valid
};

// The arguments for a packed W [out][in] of w_dtype, x [rows][in] and y [rows][out], every output.
LinearRowsArgs packed_linear_args(const void* w, WeightDType w_dtype, std::int64_t in, std::int64_t out,
                                  const float* bias, const float* x, float* y, std::int64_t rows);

void linear_rows(const LinearRowsArgs& a);
// The same with a chosen ISA (tests compare the two); std::invalid_argument if unavailable.
void linear_rows(const LinearRowsArgs& a, LinearIsa isa);

// The same outputs [out_begin, out_end) of every row through Eigen's blocked GEMM (fp32 operands
// and accumulation), for the rows of one prompt: W's rows are widened to float (exact) and
// multiplied as a float32 copy of W would be. W and x must be packed (w_stride == x_stride == in;
// std::invalid_argument otherwise). The rounding
// depends on the row count, so the runner uses it on whole prompts only (optimized/backend.h).
void linear_gemm(const LinearRowsArgs& a);

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight for x, out: [rows][width], weight: [width];
// the mean square in double, one pass, in index order.
void rmsnorm(const float* x, std::int64_t rows, std::int64_t width, const float* weight, double eps, float* out);

// Rotate-half RoPE in place: x [rows][heads][head_dim], row r at positions[r], with the cos / sin
// tables [table_rows][head_dim / 2]. std::invalid_argument for a position outside the table.
void rope(float* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, const std::int32_t* positions,
          const float* cos_table, const float* sin_table, std::int64_t table_rows);

// gate[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp(-gate[i])) * up[i], i < n.
void swiglu(float* gate, const float* up, std::int64_t n);

}  // namespace kvcheck
