#include "reference/dot_rows.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <stdexcept>
#include <string>

#include <fmt/format.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVCHECK_DOT_X86 1
#include <immintrin.h>
#endif

// DLanes values only cross always-inline functions, so the AVX argument-passing ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kvcheck {
namespace {

// Eight doubles: two SSE2 registers' worth per operation at baseline x86-64 (four instructions),
// two under AVX2, one under AVX-512. Lane l only ever meets lane l, so every build gives the same
// bits.
typedef double DLanes __attribute__((vector_size(64)));
#define KVCHECK_DOT_INLINE inline __attribute__((always_inline))

namespace portable {
// std::fma: one rounding, in hardware where the compiler may use it and in glibc's exact software
// otherwise (slow, but the same bits).
KVCHECK_DOT_INLINE DLanes madd(const DLanes& acc, const DLanes& w, const DLanes& x) {
  DLanes r;
  for (int l = 0; l < 8; ++l) r[l] = std::fma(w[l], x[l], acc[l]);
  return r;
}
#define KVCHECK_DOT_O 2
#define KVCHECK_DOT_R 1
#include "reference/dot_rows_body.inc"
#undef KVCHECK_DOT_R
#undef KVCHECK_DOT_O
}  // namespace portable

#if defined(KVCHECK_DOT_X86)
// The fused multiply-adds are explicit (madd); this file builds with -ffp-contract=off, so no other
// multiply and add fuse.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
namespace avx2 {
typedef double DLanes4 __attribute__((vector_size(32)));
KVCHECK_DOT_INLINE DLanes madd(const DLanes& acc, const DLanes& w, const DLanes& x) {
  const auto lo = [](const DLanes& v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3); };
  const auto hi = [](const DLanes& v) { return __builtin_shufflevector(v, v, 4, 5, 6, 7); };
  const DLanes4 l = (DLanes4)_mm256_fmadd_pd((__m256d)lo(w), (__m256d)lo(x), (__m256d)lo(acc));
  const DLanes4 h = (DLanes4)_mm256_fmadd_pd((__m256d)hi(w), (__m256d)hi(x), (__m256d)hi(acc));
  return __builtin_shufflevector(l, h, 0, 1, 2, 3, 4, 5, 6, 7);
}
#define KVCHECK_DOT_O 2
#define KVCHECK_DOT_R 2
#include "reference/dot_rows_body.inc"
#undef KVCHECK_DOT_R
#undef KVCHECK_DOT_O
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx2,fma"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx2,fma")
#endif
namespace avx512 {
KVCHECK_DOT_INLINE DLanes madd(const DLanes& acc, const DLanes& w, const DLanes& x) {
  return (DLanes)_mm512_fmadd_pd((__m512d)w, (__m512d)x, (__m512d)acc);
}
// Lane i of the result: ((a_i[0] + a_i[1]) + (a_i[2] + a_i[3])) + ((a_i[4] + a_i[5]) + (a_i[6] + a_i[7]))
// for the eight arguments a_0 .. a_7, the tree finish() takes one accumulator at a time, in 14
// shuffles and 7 vector adds instead of 56 extractions and adds.
KVCHECK_DOT_INLINE DLanes combine8(const DLanes& a0, const DLanes& a1, const DLanes& a2, const DLanes& a3,
                                   const DLanes& a4, const DLanes& a5, const DLanes& a6, const DLanes& a7) {
  // Pair sums: lanes [p01(a), p01(b), p23(a), p23(b), p45(a), p45(b), p67(a), p67(b)].
  const auto pairs = [](const DLanes& a, const DLanes& b) {
    return __builtin_shufflevector(a, b, 0, 8, 2, 10, 4, 12, 6, 14) +
           __builtin_shufflevector(a, b, 1, 9, 3, 11, 5, 13, 7, 15);
  };
  // Lane pairs [x.0, x.2, y.0, y.2] + [x.1, x.3, y.1, y.3]: each lane pair summed with the next.
  const auto quads = [](const DLanes& x, const DLanes& y) {
    return __builtin_shufflevector(x, y, 0, 1, 4, 5, 8, 9, 12, 13) +
           __builtin_shufflevector(x, y, 2, 3, 6, 7, 10, 11, 14, 15);
  };
  // quads(pairs(a0, a1), pairs(a2, a3)): [lo(a0), lo(a1), hi(a0), hi(a1), lo(a2), lo(a3), hi(a2),
  // hi(a3)] with lo = p01 + p23, hi = p45 + p67; quads of two of those: lo + hi in argument order.
  return quads(quads(pairs(a0, a1), pairs(a2, a3)), quads(pairs(a4, a5), pairs(a6, a7)));
}
#define KVCHECK_DOT_COMBINE8 1
#define KVCHECK_DOT_O 4
#define KVCHECK_DOT_R 4
#include "reference/dot_rows_body.inc"
#undef KVCHECK_DOT_R
#undef KVCHECK_DOT_O
#undef KVCHECK_DOT_COMBINE8
}  // namespace avx512
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

constexpr DotIsa kIsas[] = {DotIsa::kPortable, DotIsa::kAvx2, DotIsa::kAvx512};  // narrowest first

void check(const DotRowsArgs& a) {
  if (a.rows < 0 || a.outs < 0 || a.in < 0 || a.x_stride < a.in || a.w_stride < a.in || a.y_stride < a.outs ||
      (a.rows > 0 && a.outs > 0 && (a.y == nullptr || (a.in > 0 && (a.x == nullptr || a.w == nullptr))))) {
    throw std::invalid_argument(fmt::format("dot_rows: inconsistent shapes or strides (rows {}, outs {}, in {}, "
                                            "strides x {} w {} y {})",
                                            a.rows, a.outs, a.in, a.x_stride, a.w_stride, a.y_stride));
  }
}

}  // namespace

// Probed once (CPUID traps to the hypervisor in a virtual machine). __builtin_cpu_supports also
// checks that the OS saves the AVX and AVX-512 registers.
bool dot_isa_available(DotIsa isa) {
#if defined(KVCHECK_DOT_X86)
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
                    avx512 = avx2 && __builtin_cpu_supports("avx512f");
  switch (isa) {
    case DotIsa::kAvx2: return avx2;
    case DotIsa::kAvx512: return avx512;
    case DotIsa::kPortable: break;
  }
  return true;
#else
  return isa == DotIsa::kPortable;
#endif
}

const char* dot_isa_name(DotIsa isa) {
  switch (isa) {
    case DotIsa::kPortable: return "portable";
    case DotIsa::kAvx2: return "avx2";
    case DotIsa::kAvx512: return "avx512";
  }
  return "?";
}

// KVCHECK_ISA caps the choice as it does for the engine's kernels (kernels/cpu/dense_ops.h).
DotIsa dot_rows_isa() {
  static const DotIsa isa = [] {
    DotIsa cap = DotIsa::kAvx512;
    if (const char* env = std::getenv("KVCHECK_ISA"); env != nullptr && *env != '\0') {
      const auto named = std::find_if(std::begin(kIsas), std::end(kIsas),
                                      [env](DotIsa i) { return std::string(env) == dot_isa_name(i); });
      if (named == std::end(kIsas)) {
        throw std::invalid_argument(std::string("KVCHECK_ISA: '") + env + "' is not portable, avx2 or avx512");
      }
      cap = *named;
    }
    DotIsa widest = DotIsa::kPortable;
    for (const DotIsa i : kIsas) {
      if (static_cast<int>(i) <= static_cast<int>(cap) && dot_isa_available(i)) widest = i;
    }
    return widest;
  }();
  return isa;
}

void dot_rows(const DotRowsArgs& a, DotIsa isa) {
  check(a);
  if (!dot_isa_available(isa)) {
    throw std::invalid_argument(std::string("dot_rows: ISA ") + dot_isa_name(isa) + " is not available on this CPU");
  }
  if (a.rows == 0 || a.outs == 0) return;
  switch (isa) {
#if defined(KVCHECK_DOT_X86)
    case DotIsa::kAvx512: avx512::run(a); return;
    case DotIsa::kAvx2: avx2::run(a); return;
#endif
    default: portable::run(a); return;
  }
}

void dot_rows(const DotRowsArgs& a) { dot_rows(a, dot_rows_isa()); }

void dot_rows(const Eigen::Ref<const MatrixRMd>& x, const Eigen::Ref<const MatrixRMd>& w, Eigen::Ref<MatrixRMd> y,
              bool accumulate) {
  if (x.cols() != w.cols() || y.rows() != x.rows() || y.cols() != w.rows()) {
    throw std::invalid_argument(fmt::format("dot_rows: x {}x{}, w {}x{} and y {}x{} disagree", x.rows(), x.cols(),
                                            w.rows(), w.cols(), y.rows(), y.cols()));
  }
  DotRowsArgs a;
  a.x = x.data();
  a.x_stride = x.outerStride();
  a.w = w.data();
  a.w_stride = w.outerStride();
  a.y = y.data();
  a.y_stride = y.outerStride();
  a.rows = x.rows();
  a.outs = w.rows();
  a.in = x.cols();
  a.accumulate = accumulate;
  // A single row or column block: Eigen reports its outer stride as the full row's, always >= in.
  if (a.rows <= 1) a.x_stride = std::max(a.x_stride, a.in);
  if (a.outs <= 1) a.w_stride = std::max(a.w_stride, a.in);
  if (a.rows <= 1) a.y_stride = std::max(a.y_stride, a.outs);
  dot_rows(a);
}

}  // namespace kvcheck
