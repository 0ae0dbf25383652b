// The reference's one product kernel: every projection, the lm_head and attention's Q Kᵀ and P V
// are dot products of double rows, and each comes from here.
//
// y[r][o] = x[r] · w[o] (or y[r][o] += it), the sum over k in a fixed order that depends on
// nothing but `in`: eight lane sums, lane l over k = l, l + 8, ... below 8 * floor(in / 8) in
// increasing k, each term added with one fused multiply-add (lane = fma(x[k], w[k], lane)),
// combined as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)), plus the tail
// k >= 8 * floor(in / 8) summed in order the same way. The lanes and tree of
// kernels/cpu/dense_ops.h's linear_rows, in double, fused (the engine's float kernels never fuse).
//
// So the reference's bits depend on neither the machine (an Eigen GEMM's depend on its cache
// blocking, which Eigen sizes from the CPU's caches, and on the SIMD width it was built for), nor
// the thread count, nor the tile a thread owns. On x86-64 the loop is compiled for baseline
// x86-64 (std::fma), for AVX2 with FMA and for AVX-512, and the widest the CPU runs is used: each
// performs the same fused multiply-adds and adds lane for lane (reference/CMakeLists.txt builds
// this file with -ffp-contract=off, so nothing else is fused), so the choice never changes a bit
// (DotRows.EveryIsaGivesTheSameBits).
#pragma once

#include <cstdint>

#include "reference/matrix.h"

namespace kvcheck {

struct DotRowsArgs {
  const double* x = nullptr;  // [rows][in], x_stride doubles between rows
  std::int64_t x_stride = 0;
  const double* w = nullptr;  // [outs][in], w_stride doubles between rows
  std::int64_t w_stride = 0;
  double* y = nullptr;        // [rows][outs], y_stride doubles between rows
  std::int64_t y_stride = 0;
  std::int64_t rows = 0, outs = 0, in = 0;
  bool accumulate = false;    // y += x · w instead of y = x · w
};

// kAvx2: AVX2 and FMA; kAvx512: those and AVX-512 F. Ordered narrowest first.
enum class DotIsa { kPortable, kAvx2, kAvx512 };

// The widest this CPU runs, capped by KVCHECK_ISA (portable, avx2, avx512) where that environment
// variable is set; an unknown name throws std::invalid_argument.
DotIsa dot_rows_isa();
bool dot_isa_available(DotIsa isa);
const char* dot_isa_name(DotIsa isa);

// std::invalid_argument on negative sizes or strides shorter than the rows they hold.
void dot_rows(const DotRowsArgs& a);
// The same with a chosen ISA (tests compare them); std::invalid_argument if unavailable.
void dot_rows(const DotRowsArgs& a, DotIsa isa);

// y (=, +=) x wᵀ for row-major blocks (inner stride 1): x [rows, in], w [outs, in], y [rows, outs].
void dot_rows(const Eigen::Ref<const MatrixRMd>& x, const Eigen::Ref<const MatrixRMd>& w, Eigen::Ref<MatrixRMd> y,
              bool accumulate = false);

}  // namespace kvcheck
