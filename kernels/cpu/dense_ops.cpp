#include "kernels/cpu/dense_ops.h"

#include <cstddef>
#include <cstring>
#include <string>
#include <stdexcept>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVCHECK_LINEAR_AVX2 1
#include <immintrin.h>
#endif

// Lanes values only cross always-inline functions, so the AVX argument-passing ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kvcheck {
namespace {

// Eight floats; on a baseline x86-64 target GCC lowers each operation to two SSE instructions,
// under target("avx2") to one. Lane l only ever meets lane l, so both give the same bits.
typedef float Lanes __attribute__((vector_size(32)));
// Eight bf16 / f16 bit patterns, and the same widened to 32 bits (bf16 widening).
typedef std::uint16_t U16Lanes __attribute__((vector_size(16)));
typedef std::uint32_t U32Lanes __attribute__((vector_size(32)));

#define KVCHECK_ALWAYS_INLINE inline __attribute__((always_inline))

// The kernel body twice: the templates must be compiled under the target they run on (an
// always-inline F16C intrinsic cannot be inlined into a function without F16C), so each build
// gets its own copy of them.
namespace portable {
#include "kernels/cpu/dense_ops_linear_rows.inc"
}  // namespace portable

#if defined(KVCHECK_LINEAR_AVX2)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,f16c")
#endif
namespace avx2 {
#define KVCHECK_LINEAR_F16C 1
#include "kernels/cpu/dense_ops_linear_rows.inc"
#undef KVCHECK_LINEAR_F16C
}  // namespace avx2
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif

void check(const LinearRowsArgs& a) {
  if (a.rows < 0 || a.in < 0 || a.out_begin < 0 || a.out_end < a.out_begin || a.w_stride < a.in ||
      a.x_stride < a.in || a.y_stride < a.out_end || (a.rows > 0 && a.out_end > a.out_begin &&
                                                        (a.w == nullptr || a.x == nullptr || a.y == nullptr))) {
    throw std::invalid_argument("linear_rows: inconsistent shapes or strides");
  }
  if (a.w_dtype != WeightDType::kF32 && a.w_dtype != WeightDType::kF16 && a.w_dtype != WeightDType::kBF16) {
    throw std::invalid_argument("linear_rows: unknown weight dtype");
  }
}

}  // namespace

bool linear_isa_available(LinearIsa isa) {
  if (isa == LinearIsa::kPortable) return true;
#if defined(KVCHECK_LINEAR_AVX2)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

LinearIsa linear_rows_isa() {
  static const LinearIsa isa = linear_isa_available(LinearIsa::kAvx2) ? LinearIsa::kAvx2 : LinearIsa::kPortable;
  return isa;
}

const char* linear_isa_name(LinearIsa isa) { return isa == LinearIsa::kAvx2 ? "avx2" : "portable"; }

void linear_rows(const LinearRowsArgs& a, LinearIsa isa) {
  check(a);
  if (!linear_isa_available(isa)) {
    throw std::invalid_argument(std::string("linear_rows: ISA ") + linear_isa_name(isa) + " is not available on this CPU");
  }
#if defined(KVCHECK_LINEAR_AVX2)
  if (isa == LinearIsa::kAvx2) {
    avx2::run(a);
    return;
  }
#endif
  portable::run(a);
}

void linear_rows(const LinearRowsArgs& a) { linear_rows(a, linear_rows_isa()); }

}  // namespace kvcheck
