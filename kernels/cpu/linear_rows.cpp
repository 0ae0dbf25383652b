#include "kernels/cpu/linear_rows.h"

#include <cstring>
#include <string>
#include <stdexcept>

// Lanes values only cross always-inline functions, so the AVX argument-passing ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kvcheck {
namespace {

// Eight floats; on a baseline x86-64 target GCC lowers each operation to two SSE instructions,
// under target("avx2") to one. Lane l only ever meets lane l, so both give the same bits.
typedef float Lanes __attribute__((vector_size(32)));

#define KVCHECK_ALWAYS_INLINE inline __attribute__((always_inline))

KVCHECK_ALWAYS_INLINE Lanes load8(const float* p) {
  Lanes v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

KVCHECK_ALWAYS_INLINE float combine(const Lanes& s) {
  return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

// O output rows of W times R rows of x: O*R accumulators, each weight vector loaded once per
// R rows and each x vector once per O outputs.
template <int O, int R>
KVCHECK_ALWAYS_INLINE void tile(const LinearRowsArgs& a, std::int64_t o0, std::int64_t r0) {
  const std::int64_t body = a.in & ~std::int64_t{7};
  Lanes acc[O][R];
  for (int o = 0; o < O; ++o) {
    for (int r = 0; r < R; ++r) acc[o][r] = Lanes{0, 0, 0, 0, 0, 0, 0, 0};
  }
  const float* w = a.w + o0 * a.w_stride;
  const float* x = a.x + r0 * a.x_stride;
  for (std::int64_t k = 0; k < body; k += 8) {
    Lanes wv[O];
    for (int o = 0; o < O; ++o) wv[o] = load8(w + o * a.w_stride + k);
    for (int r = 0; r < R; ++r) {
      const Lanes xv = load8(x + r * a.x_stride + k);
      for (int o = 0; o < O; ++o) acc[o][r] += wv[o] * xv;
    }
  }
  for (int o = 0; o < O; ++o) {
    for (int r = 0; r < R; ++r) {
      float tail = 0.0f;
      for (std::int64_t k = body; k < a.in; ++k) tail += w[o * a.w_stride + k] * x[r * a.x_stride + k];
      float s = combine(acc[o][r]) + tail;
      if (a.bias != nullptr) s += a.bias[o0 + o];
      a.y[(r0 + r) * a.y_stride + o0 + o] = s;
    }
  }
}

template <int O>
KVCHECK_ALWAYS_INLINE void rows_of(const LinearRowsArgs& a, std::int64_t o0) {
  std::int64_t r = 0;
  for (; r + 4 <= a.rows; r += 4) tile<O, 4>(a, o0, r);
  switch (a.rows - r) {
    case 3: tile<O, 3>(a, o0, r); break;
    case 2: tile<O, 2>(a, o0, r); break;
    case 1: tile<O, 1>(a, o0, r); break;
    default: break;
  }
}

KVCHECK_ALWAYS_INLINE void run(const LinearRowsArgs& a) {
  std::int64_t o = a.out_begin;
  for (; o + 2 <= a.out_end; o += 2) rows_of<2>(a, o);
  if (o < a.out_end) rows_of<1>(a, o);
}

void run_portable(const LinearRowsArgs& a) { run(a); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define KVCHECK_LINEAR_AVX2 1
__attribute__((target("avx2"))) void run_avx2(const LinearRowsArgs& a) { run(a); }
#endif

void check(const LinearRowsArgs& a) {
  if (a.rows < 0 || a.in < 0 || a.out_begin < 0 || a.out_end < a.out_begin || a.w_stride < a.in ||
      a.x_stride < a.in || a.y_stride < a.out_end || (a.rows > 0 && a.out_end > a.out_begin &&
                                                        (a.w == nullptr || a.x == nullptr || a.y == nullptr))) {
    throw std::invalid_argument("linear_rows: inconsistent shapes or strides");
  }
}

}  // namespace

bool linear_isa_available(LinearIsa isa) {
  if (isa == LinearIsa::kPortable) return true;
#if defined(KVCHECK_LINEAR_AVX2)
  return __builtin_cpu_supports("avx2");
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
    run_avx2(a);
    return;
  }
#endif
  run_portable(a);
}

void linear_rows(const LinearRowsArgs& a) { linear_rows(a, linear_rows_isa()); }

}  // namespace kvcheck
