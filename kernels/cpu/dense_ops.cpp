#include "kernels/cpu/dense_ops.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cpu/lanes.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVCHECK_LINEAR_AVX2 1
#include <immintrin.h>
#endif

// Lanes values only cross always-inline functions, so the AVX argument-passing ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kvcheck {
namespace {

using lanes::Lanes;
using lanes::I8Lanes;
using lanes::Lanes16;
using lanes::U8Lanes;
using lanes::U16Lanes;
using lanes::U32Lanes;

// The kernel body twice: the templates must be compiled under the target they run on (an
// always-inline F16C intrinsic cannot be inlined into a function without F16C), so each build
// gets its own copy of them.
namespace portable {
#include "kernels/cpu/dense_ops_linear_rows.inc"
}  // namespace portable

#if defined(KVCHECK_LINEAR_AVX2)
#include "kernels/cpu/avx2_target_begin.inc"
namespace avx2 {
#define KVCHECK_LINEAR_F16C 1
#include "kernels/cpu/dense_ops_linear_rows.inc"
#undef KVCHECK_LINEAR_F16C
}  // namespace avx2
#include "kernels/cpu/avx2_target_end.inc"

#include "kernels/cpu/avx512_target_begin.inc"
namespace avx512 {
#define KVCHECK_LINEAR_F16C 1
#define KVCHECK_LINEAR_AVX512 1
#include "kernels/cpu/dense_ops_linear_rows.inc"
#undef KVCHECK_LINEAR_AVX512
#undef KVCHECK_LINEAR_F16C
}  // namespace avx512
#include "kernels/cpu/avx512_target_end.inc"
#endif

void check(const LinearRowsArgs& a) {
  if (a.rows < 0 || a.in < 0 || a.out_begin < 0 || a.out_end < a.out_begin || a.w_stride < a.in ||
      a.x_stride < a.in || a.y_stride < a.out_end || (a.rows > 0 && a.out_end > a.out_begin &&
                                                        (a.w == nullptr || a.x == nullptr || a.y == nullptr))) {
    throw std::invalid_argument("linear_rows: inconsistent shapes or strides");
  }
  switch (a.w_dtype) {
    case WeightDType::kF32:
    case WeightDType::kF16:
    case WeightDType::kBF16:
      break;
    case WeightDType::kQ8_0:
    case WeightDType::kQ4_1:
      if (a.in % 32 != 0 || a.w_stride % 32 != 0) {
        throw std::invalid_argument(std::string("linear_rows: ") + weight_dtype_name(a.w_dtype) +
                                    " rows must be whole blocks of 32 (in and w_stride)");
      }
      break;
    default:
      throw std::invalid_argument("linear_rows: unknown weight dtype");
  }
}

}  // namespace

namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c" (the
// ci/fuzz.sh build is clang's). AVX2 and AVX-512 through the builtin, which also checks that the
// OS saves the AVX (and, for AVX-512, the opmask and upper ZMM) registers.
bool probe_avx2() {
#if defined(KVCHECK_LINEAR_AVX2)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
  return __builtin_cpu_supports("avx2") && f16c;
#else
  return false;
#endif
}

bool probe_avx512() {
#if defined(KVCHECK_LINEAR_AVX2)
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
#else
  return false;
#endif
}

constexpr LinearIsa kIsas[] = {LinearIsa::kPortable, LinearIsa::kAvx2, LinearIsa::kAvx512};  // narrowest first

}  // namespace

// Probed once: CPUID traps to the hypervisor in a virtual machine, and the attention kernels ask
// on every call.
bool linear_isa_available(LinearIsa isa) {
  static const bool avx2 = probe_avx2(), avx512 = avx2 && probe_avx512();
  switch (isa) {
    case LinearIsa::kAvx2: return avx2;
    case LinearIsa::kAvx512: return avx512;
    case LinearIsa::kPortable: break;
  }
  return true;
}

// KVCHECK_ISA=portable|avx2|avx512 caps the choice (to time or test the narrower builds on a wider
// CPU); the default is the widest this CPU has.
LinearIsa linear_rows_isa() {
  static const LinearIsa isa = [] {
    LinearIsa cap = LinearIsa::kAvx512;
    if (const char* env = std::getenv("KVCHECK_ISA"); env != nullptr && *env != '\0') {
      const auto named = std::find_if(std::begin(kIsas), std::end(kIsas),
                                      [env](LinearIsa i) { return std::string(env) == linear_isa_name(i); });
      if (named == std::end(kIsas)) {
        throw std::invalid_argument(std::string("KVCHECK_ISA: '") + env + "' is not portable, avx2 or avx512");
      }
      cap = *named;
    }
    LinearIsa widest = LinearIsa::kPortable;
    for (const LinearIsa i : kIsas) {
      if (static_cast<int>(i) <= static_cast<int>(cap) && linear_isa_available(i)) widest = i;
    }
    return widest;
  }();
  return isa;
}

const char* linear_isa_name(LinearIsa isa) {
  switch (isa) {
    case LinearIsa::kAvx2: return "avx2";
    case LinearIsa::kAvx512: return "avx512";
    case LinearIsa::kPortable: break;
  }
  return "portable";
}

void linear_rows(const LinearRowsArgs& a, LinearIsa isa) {
  check(a);
  if (!linear_isa_available(isa)) {
    throw std::invalid_argument(std::string("linear_rows: ISA ") + linear_isa_name(isa) + " is not available on this CPU");
  }
#if defined(KVCHECK_LINEAR_AVX2)
  if (isa == LinearIsa::kAvx512) {
    avx512::run(a);
    return;
  }
  if (isa == LinearIsa::kAvx2) {
    avx2::run(a);
    return;
  }
#endif
  portable::run(a);
}

void linear_rows(const LinearRowsArgs& a) { linear_rows(a, linear_rows_isa()); }

LinearRowsArgs packed_linear_args(const void* w, WeightDType w_dtype, std::int64_t in, std::int64_t out,
                                  const float* bias, const float* x, float* y, std::int64_t rows) {
  LinearRowsArgs a;
  a.w = w;
  a.w_dtype = w_dtype;
  a.w_stride = in;
  a.in = in;
  a.bias = bias;
  a.x = x;
  a.x_stride = in;
  a.y = y;
  a.y_stride = out;
  a.rows = rows;
  a.out_begin = 0;
  a.out_end = out;
  return a;
}

void linear_gemm(const LinearRowsArgs& a) {
  check(a);
  if (a.x_stride != a.in || a.w_stride != a.in) {
    throw std::invalid_argument("linear_gemm: W and x must be packed (w_stride == x_stride == in)");
  }
  using Rows = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const std::int64_t n = a.out_end - a.out_begin;
  if (a.rows == 0 || n == 0) return;
  Eigen::Map<const Rows> xm(a.x, a.rows, a.in);
  Eigen::Map<Rows> ym(a.y, a.rows, a.y_stride);
  // W's rows widened to float (exact) into an aligned buffer, then the GEMM a float32 copy of W
  // got: the same expression type (a row block of a float matrix), strides and alignment, so the
  // same blocking and the same bits.
  thread_local Rows wf;
  wf.resize(n, a.in);
  widen_row(static_cast<const std::byte*>(a.w) + weight_row_bytes(a.w_dtype, a.out_begin * a.w_stride), a.w_dtype,
            n * a.in, wf.data());
  ym.middleCols(a.out_begin, n).noalias() = xm * wf.topRows(n).transpose();
  if (a.bias != nullptr) {
    for (std::int64_t r = 0; r < a.rows; ++r) {
      for (std::int64_t i = 0; i < n; ++i) ym(r, a.out_begin + i) += a.bias[a.out_begin + i];
    }
  }
}

void rmsnorm(const float* x, std::int64_t rows, std::int64_t width, const float* weight, double eps, float* out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    // The mean square in double: one pass, deterministic per row, as exact as it is cheap.
    double ss = 0.0;
    for (std::int64_t i = 0; i < width; ++i) {
      const double v = x[r * width + i];
      ss += v * v;
    }
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(width) + eps));
    for (std::int64_t i = 0; i < width; ++i) out[r * width + i] = x[r * width + i] * inv * weight[i];
  }
}

void rope(float* x, std::int64_t rows, std::int64_t heads, std::int64_t head_dim, const std::int32_t* positions,
          const float* cos_table, const float* sin_table, std::int64_t table_rows) {
  const std::int64_t half = head_dim / 2;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t p = positions[r];
    if (p < 0 || p >= table_rows) {
      throw std::invalid_argument("rope: position " + std::to_string(p) + " outside the table of " +
                                  std::to_string(table_rows));
    }
    const float* c = cos_table + p * half;
    const float* s = sin_table + p * half;
    for (std::int64_t hd = 0; hd < heads; ++hd) {
      float* v = x + (r * heads + hd) * head_dim;
      for (std::int64_t i = 0; i < half; ++i) {
        const float a = v[i];
        const float b = v[i + half];
        v[i] = a * c[i] - b * s[i];
        v[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void swiglu(float* gate, const float* up, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

}  // namespace kvcheck
