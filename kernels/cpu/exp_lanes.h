// exp(x) for attention weights, a vector of lanes at once, with the same bits in every build.
//
// glibc's expf is one call per element; the prefill attention spends about a third of its time
// there (`perf` of a 2K-token SmolLM2 capture). This is Cephes' expf: n = round(x / ln 2) by the
// 1.5 * 2^23 trick, r = x - n ln 2 in two parts (Cody-Waite), a degree-5 polynomial for
// (e^r - 1 - r) / r², and 2^n put into the exponent bits. Only IEEE multiplies, adds and
// compares, each lane on its own (kernels/ builds with -ffp-contract=off), so a lane gives the
// bits the scalar exp_weight gives for the same input whatever the vector width or ISA.
//
// Accuracy: within 2 ulp of exp over the range it computes (about 1.2e-7 relative, tested
// against double exp in ExpLanesProps). Inputs below -87.33654 (results under FLT_MIN) give +0,
// -inf gives +0, inputs above 88 give +inf (the attention only asks for x <= 0: s - max s), NaN
// gives NaN.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

// Lane values only cross always-inline functions, so the AVX argument-passing ABI note is moot.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace kvcheck::exp_lanes {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: x + kRound - kRound rounds x to an integer
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
inline constexpr float kLow = -87.33654f;     // exp(kLow) ~ FLT_MIN: n stays >= -126
inline constexpr float kHigh = 88.0f;         // n stays <= 127 (exp(88) = 1.65e38)
inline constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f,
                       kP3 = 4.1665795894e-2f, kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// V: a float vector type (GCC vector extension) or float; I: the int32 type of the same width.
template <class V, class I>
inline __attribute__((always_inline)) V exp_of(V x) {
  const auto low = x < kLow;
  const auto high = x > kHigh;
  const auto nan = x != x;
  const V xc = (low | high | nan) ? V{} : x;  // the lanes computed below are then all in range
  const V t = xc * kLog2e + kRound;
  const V n = t - kRound;
  const V r = (xc - n * kLn2Hi) - n * kLn2Lo;
  const V z = r * r;
  V p = kP0 * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  const V y = (p * z + r) + 1.0f;
  I bits;
  if constexpr (sizeof(V) == sizeof(float)) {
    bits = (static_cast<I>(n) + 127) << 23;
  } else {
    bits = (__builtin_convertvector(n, I) + 127) << 23;
  }
  V scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const V e = y * scale;
  return low ? V{} : (high ? V{} + __builtin_inff() : (nan ? x : e));
}

// The scalar version: what every lane of exp_of computes.
inline float exp_weight(float x) { return exp_of<float, std::int32_t>(x); }

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// exp_of over sixteen lanes, for the AVX-512 builds (callers compiled for AVX-512F): the same
// arithmetic lane for lane, its three range tests and selects made with AVX-512 compare masks
// and masked moves. GCC 12 lowers exp_of's compares of 64-byte vectors one lane at a time,
// through the stack (ExpLanesProps.SixteenLanesAreTheScalarFunction holds the bits). AVX-512F
// has FMA: the caller must be compiled with -ffp-contract=off (kernels/ is), or the multiplies
// and adds below may be contracted and change the last bit.
typedef float ExpLanes16 __attribute__((vector_size(64)));
typedef std::int32_t ExpI32Lanes16 __attribute__((vector_size(64)));

__attribute__((target("avx512f"))) inline __attribute__((always_inline)) ExpLanes16 exp_of16(ExpLanes16 x) {
  const __m512 xv = reinterpret_cast<__m512>(x);
  const __mmask16 low = _mm512_cmp_ps_mask(xv, _mm512_set1_ps(kLow), _CMP_LT_OQ);    // x < kLow
  const __mmask16 high = _mm512_cmp_ps_mask(xv, _mm512_set1_ps(kHigh), _CMP_GT_OQ);  // x > kHigh
  const __mmask16 nan = _mm512_cmp_ps_mask(xv, xv, _CMP_UNORD_Q);                    // x != x
  const __mmask16 out = static_cast<__mmask16>(low | high | nan);
  // The lanes computed below are then all in range (+0 in the others, as V{} in exp_of).
  const ExpLanes16 xc = reinterpret_cast<ExpLanes16>(_mm512_maskz_mov_ps(static_cast<__mmask16>(~out), xv));
  const ExpLanes16 t = xc * kLog2e + kRound;
  const ExpLanes16 n = t - kRound;
  const ExpLanes16 r = (xc - n * kLn2Hi) - n * kLn2Lo;
  const ExpLanes16 z = r * r;
  ExpLanes16 p = kP0 * r + kP1;
  p = p * r + kP2;
  p = p * r + kP3;
  p = p * r + kP4;
  p = p * r + kP5;
  const ExpLanes16 y = (p * z + r) + 1.0f;
  const ExpI32Lanes16 bits = (__builtin_convertvector(n, ExpI32Lanes16) + 127) << 23;
  ExpLanes16 scale;
  std::memcpy(&scale, &bits, sizeof scale);
  const ExpLanes16 e = y * scale;
  // low ? +0 : (high ? +inf : (nan ? x : e)).
  __m512 result = _mm512_mask_mov_ps(reinterpret_cast<__m512>(e), nan, xv);
  result = _mm512_mask_mov_ps(result, high, _mm512_set1_ps(__builtin_inff()));
  result = _mm512_maskz_mov_ps(static_cast<__mmask16>(~low), result);
  return reinterpret_cast<ExpLanes16>(result);
}
#endif

}  // namespace kvcheck::exp_lanes

#pragma GCC diagnostic pop
