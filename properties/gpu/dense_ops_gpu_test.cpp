// The CUDA dense operations (kernels/dense_ops_cuda.h) against their CPU twins
// (kernels/cpu/dense_ops.h), one test per operation, on random shapes (awkward sizes: widths that
// are not multiples of a warp, single rows) and random values. The two sides may round
// differently (another summation order, FMA contraction on the device, CUDA's expf), so each
// element is compared within a tolerance derived from its own inputs: a named number of float
// roundings times the magnitude of the terms that make the element. A wrong index, a dropped
// bias, a missing term or a wrong formula is off by the size of a term, far beyond it. Before
// this, a wrong GPU op only showed as a wrong token in EngineGpu. Skips visibly without CUDA or
// without a device.
//   RC_PARAMS="seed=7 max_success=2000" build/properties/kvcheck_gpu_tests --gtest_filter='DenseOpsGpu.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/weight_dtype.h"
#include "kernels/dense_ops_cuda.h"
#include "properties/support/float_eps.h"
#include "properties/support/gpu_skip.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::kFloatEps;

constexpr int kCases = 100;
// The smallest normal float: results below it may flush or keep subnormal bits on either side.
constexpr double kTiny = 0x1.0p-126;

// Values with full mantissas, mixed signs and a spread of magnitudes.
std::vector<float> gen_values(std::int64_t n, double scale) {
  const auto value = rc::gen::map(rc::gen::inRange<int>(-1000000, 1000001), [scale](int v) {
    return static_cast<float>(static_cast<double>(v) * 1e-6 * scale);
  });
  return *rc::gen::container<std::vector<float>>(static_cast<std::size_t>(n), value);
}

// |got - want| <= tol, or both the same non-finite value.
void expect_close(const char* what, std::size_t i, float got, float want, double tol) {
  if (!std::isfinite(want)) {
    RC_ASSERT(std::memcmp(&got, &want, sizeof got) == 0);
    return;
  }
  const double diff = std::fabs(static_cast<double>(got) - static_cast<double>(want));
  if (!(diff <= tol)) RC_FAIL(std::string(what) + " element " + std::to_string(i) + ": gpu " + std::to_string(got) +
                              ", cpu " + std::to_string(want) + ", |diff| " + std::to_string(diff) +
                              " > tolerance " + std::to_string(tol));
}

// The weight bytes of W [out][in] as `type` stores them, from float values (bf16 / f16: the values
// rounded to that type, so both sides read the same bits).
std::vector<std::uint8_t> weight_bytes(const std::vector<float>& w, CudaWeightType type) {
  std::vector<std::uint8_t> bytes;
  if (type == CudaWeightType::kF32) {
    bytes.resize(w.size() * 4);
    std::memcpy(bytes.data(), w.data(), bytes.size());
    return bytes;
  }
  bytes.resize(w.size() * 2);
  for (std::size_t i = 0; i < w.size(); ++i) {
    std::uint32_t u;
    std::memcpy(&u, &w[i], sizeof u);
    std::uint16_t h;
    if (type == CudaWeightType::kBF16) {
      h = static_cast<std::uint16_t>(u >> 16);  // truncation: any bf16 pattern will do
    } else {
      // The values are well inside the f16 range: keep the sign, a normal exponent near the
      // float's and the top mantissa bits.
      const int e = static_cast<int>((u >> 23) & 0xFFu) - 127 + 15;
      const std::uint16_t sign = static_cast<std::uint16_t>((u >> 16) & 0x8000u);
      h = e <= 0 ? sign : static_cast<std::uint16_t>(sign | (std::min(e, 30) << 10) | ((u >> 13) & 0x3FFu));
    }
    std::memcpy(bytes.data() + 2 * i, &h, 2);
  }
  return bytes;
}

WeightDType cpu_dtype(CudaWeightType t) {
  return t == CudaWeightType::kBF16 ? WeightDType::kBF16 : t == CudaWeightType::kF16 ? WeightDType::kF16 : WeightDType::kF32;
}

// One projection case: y = W x (+ b) for `rows` rows, through linear_rows / linear_rows_cuda
// (gemm false) or linear_gemm / linear_gemm_cuda (gemm true).
void check_linear(bool gemm) {
  const std::int64_t in = *rc::gen::inRange<std::int64_t>(1, 300);
  const std::int64_t out = *rc::gen::inRange<std::int64_t>(1, 80);
  const std::int64_t rows = *rc::gen::inRange<std::int64_t>(1, 10);
  const bool bias = *rc::gen::arbitrary<bool>();
  const auto type = *rc::gen::element(CudaWeightType::kF32, CudaWeightType::kF16, CudaWeightType::kBF16);
  const std::vector<float> w0 = gen_values(out * in, 1.0);
  const std::vector<float> x = gen_values(rows * in, 4.0);
  const std::vector<float> b = gen_values(out, 2.0);
  const std::vector<std::uint8_t> wb = weight_bytes(w0, type);

  std::vector<float> cpu(static_cast<std::size_t>(rows * out)), gpu(cpu.size());
  const LinearRowsArgs a =
      packed_linear_args(wb.data(), cpu_dtype(type), in, out, bias ? b.data() : nullptr, x.data(), cpu.data(), rows);
  if (gemm) linear_gemm(a);
  else linear_rows(a);
  CudaMatrix m = upload_matrix_cuda(wb.data(), type, out, in, bias ? b.data() : nullptr);
  if (gemm) linear_gemm_cuda(m, x.data(), rows, gpu.data());
  else linear_rows_cuda(m, x.data(), rows, gpu.data());
  free_matrix_cuda(m);

  // Each side sums in+1 products (bias last) in its own order: each is within
  // gamma_(in+1) * sum |terms| of the exact sum, so the two within twice that.
  const double gamma = static_cast<double>(in + 1) * kFloatEps / (1.0 - static_cast<double>(in + 1) * kFloatEps);
  std::vector<float> w(static_cast<std::size_t>(out * in));
  widen_row(reinterpret_cast<const std::byte*>(wb.data()), cpu_dtype(type), out * in, w.data());
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t o = 0; o < out; ++o) {
      double magnitude = bias ? std::fabs(b[static_cast<std::size_t>(o)]) : 0.0;
      for (std::int64_t k = 0; k < in; ++k) {
        magnitude += std::fabs(static_cast<double>(w[static_cast<std::size_t>(o * in + k)]) *
                               x[static_cast<std::size_t>(r * in + k)]);
      }
      const auto i = static_cast<std::size_t>(r * out + o);
      expect_close(gemm ? "linear_gemm" : "linear_rows", i, gpu[i], cpu[i], 2.0 * gamma * magnitude + kTiny);
    }
  }
}

TEST(DenseOpsGpu, LinearRowsMatchesCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  check_property("dense ops/linear_rows_cuda vs linear_rows", kCases, [] { check_linear(false); });
}

TEST(DenseOpsGpu, LinearGemmMatchesCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  check_property("dense ops/linear_gemm_cuda vs linear_gemm", kCases, [] { check_linear(true); });
}

TEST(DenseOpsGpu, RmsNormMatchesCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  check_property("dense ops/rmsnorm_cuda vs rmsnorm", kCases, [] {
    const std::int64_t width = *rc::gen::inRange<std::int64_t>(1, 700);
    const std::int64_t rows = *rc::gen::inRange<std::int64_t>(1, 9);
    const double eps = *rc::gen::element(1e-6, 1e-5);
    const std::vector<float> x = gen_values(rows * width, 8.0);
    const std::vector<float> weight = gen_values(width, 2.0);
    std::vector<float> cpu(x.size()), gpu(x.size());
    rmsnorm(x.data(), rows, width, weight.data(), eps, cpu.data());
    rmsnorm_cuda(x.data(), rows, width, weight.data(), eps, gpu.data());
    for (std::int64_t r = 0; r < rows; ++r) {
      double ss = 0.0;
      for (std::int64_t i = 0; i < width; ++i) ss += static_cast<double>(x[static_cast<std::size_t>(r * width + i)]) *
                                                     x[static_cast<std::size_t>(r * width + i)];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(width) + eps);
      for (std::int64_t i = 0; i < width; ++i) {
        const auto k = static_cast<std::size_t>(r * width + i);
        // The mean square is summed in double on both sides (orders differ by ~width * 2^-53), so
        // the float inverse may differ by one rounding (2 eps) and each side's two products add one
        // rounding each (2 x 2 eps): 6 eps of |x * inv * weight|, 8 with margin.
        expect_close("rmsnorm", k, gpu[k], cpu[k], 8.0 * kFloatEps * std::fabs(x[k] * inv * weight[static_cast<std::size_t>(i)]) + kTiny);
      }
    }
  });
}

TEST(DenseOpsGpu, RopeMatchesCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  check_property("dense ops/rope_cuda vs rope", kCases, [] {
    const std::int64_t half = *rc::gen::inRange<std::int64_t>(1, 70);
    const std::int64_t head_dim = 2 * half;
    const std::int64_t heads = *rc::gen::inRange<std::int64_t>(1, 6);
    const std::int64_t rows = *rc::gen::inRange<std::int64_t>(1, 9);
    const std::int64_t table_rows = *rc::gen::inRange<std::int64_t>(1, 40);
    const std::vector<float> cos_table = gen_values(table_rows * half, 1.0);
    const std::vector<float> sin_table = gen_values(table_rows * half, 1.0);
    const auto positions =
        *rc::gen::container<std::vector<std::int32_t>>(static_cast<std::size_t>(rows),
                                                        rc::gen::inRange<std::int32_t>(0, static_cast<std::int32_t>(table_rows)));
    const std::vector<float> x = gen_values(rows * heads * head_dim, 4.0);
    std::vector<float> cpu = x, gpu = x;
    rope(cpu.data(), rows, heads, head_dim, positions.data(), cos_table.data(), sin_table.data(), table_rows);
    rope_cuda(gpu.data(), rows, heads, head_dim, positions.data(), cos_table.data(), sin_table.data(), table_rows);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::int64_t p = positions[static_cast<std::size_t>(r)];
      for (std::int64_t h = 0; h < heads; ++h) {
        for (std::int64_t i = 0; i < half; ++i) {
          const std::size_t base = static_cast<std::size_t>((r * heads + h) * head_dim);
          const double a = x[base + static_cast<std::size_t>(i)], b = x[base + static_cast<std::size_t>(i + half)];
          const double c = cos_table[static_cast<std::size_t>(p * half + i)];
          const double s = sin_table[static_cast<std::size_t>(p * half + i)];
          // a*c - b*s and b*c + a*s: two products and a sum, rounded three times on the CPU and
          // at least twice on the device (an FMA fuses one product): within 3 eps of
          // |a c| + |b s| each, 6 eps apart, 8 with margin.
          const double magnitude = std::fabs(a * c) + std::fabs(b * s) + std::fabs(b * c) + std::fabs(a * s);
          for (const std::size_t k : {base + static_cast<std::size_t>(i), base + static_cast<std::size_t>(i + half)}) {
            expect_close("rope", k, gpu[k], cpu[k], 8.0 * kFloatEps * magnitude + kTiny);
          }
        }
      }
    }
  });
}

TEST(DenseOpsGpu, SwiGluMatchesCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  check_property("dense ops/swiglu_cuda vs swiglu", kCases, [] {
    const std::int64_t n = *rc::gen::inRange<std::int64_t>(1, 2000);
    const std::vector<float> gate = gen_values(n, 30.0);
    const std::vector<float> up = gen_values(n, 4.0);
    std::vector<float> cpu = gate, gpu = gate;
    swiglu(cpu.data(), up.data(), n);
    swiglu_cuda(gpu.data(), up.data(), n);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(i);
      const double g = gate[k];
      // exp: CUDA's expf is within 2 ulp, glibc's within 1 (<= 4 eps and 2 eps relative); 1 + e
      // passes that on and adds a rounding; the division and the product add one each: <= 8 eps
      // relative per side, 16 eps apart, 20 with margin, of |silu(g) * up|.
      const double want = g / (1.0 + std::exp(-g)) * up[k];
      expect_close("swiglu", k, gpu[k], cpu[k], 20.0 * kFloatEps * std::fabs(want) + kTiny);
    }
  });
}

}  // namespace
}  // namespace kvcheck
