// The CUDA quantizers against the CPU twin: identical codes, metadata and dequantized values,
// for every format and value distribution. Skips visibly without CUDA or without a device.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/quantize.h"
#include "kernels/device.h"
#include "properties/support/gpu_skip.h"
#include "kernels/quantize_cuda.h"
#include "properties/support/quant_cases.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {


constexpr int kSeedsPerCase = 12;

// The shape of case `seed` for `spec`: head_dims that the packing factor and channel group divide,
// and whole token groups (several per-token rows).
struct IntCaseShape {
  std::int64_t head_dim;
  std::int64_t tokens;
};
IntCaseShape int_case_shape(const QuantSpec& spec, int seed) {
  return {spec.granularity == Granularity::kPerTokenGroup ? 32 * (1 + seed % 4) : 4 * (1 + seed * 5),
          spec.token_group() * (1 + seed % 3) * (spec.token_group() == 1 ? 7 : 1)};
}

std::string int_case_name(const QuantSpec& spec, int dist, int seed) {
  return quant_spec_name(spec) + " " + testing::value_dist_name(static_cast<testing::ValueDist>(dist)) + " seed " +
         std::to_string(seed);
}

TEST(QuantizeGpu, IntCodesAndMetadataEqualTheCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  for (const QuantSpec& spec : testing::all_int_specs()) {
    for (int dist = 0; dist < testing::kValueDistCount; ++dist) {
      for (int seed = 0; seed < kSeedsPerCase; ++seed) {
        const auto [d, tokens] = int_case_shape(spec, seed);
        const std::vector<float> x = testing::make_values(static_cast<testing::ValueDist>(dist), tokens, d,
                                                          static_cast<std::uint64_t>(seed * 7919 + dist));
        const auto n_codes = static_cast<std::size_t>(tokens * spec.row_bytes(d));
        const auto n_meta = static_cast<std::size_t>(spec.meta_count(tokens, d));
        std::vector<std::uint8_t> c_cpu(n_codes), c_gpu(n_codes);
        std::vector<std::uint16_t> s_cpu(n_meta), s_gpu(n_meta), z_cpu(n_meta), z_gpu(n_meta);
        quantize(spec, x, tokens, d, {}, c_cpu, s_cpu, z_cpu);
        quantize_cuda(spec, x.data(), tokens, d, {}, c_gpu.data(), s_gpu.data(), z_gpu.data());
        const std::string what = int_case_name(spec, dist, seed);
        ASSERT_EQ(c_cpu, c_gpu) << what;
        ASSERT_EQ(s_cpu, s_gpu) << what;
        ASSERT_EQ(z_cpu, z_gpu) << what;
        std::vector<float> o_cpu(x.size()), o_gpu(x.size());
        dequantize(spec, c_cpu, s_cpu, z_cpu, tokens, d, o_cpu);
        dequantize_cuda(spec, c_cpu.data(), s_cpu.data(), z_cpu.data(), tokens, d, o_gpu.data());
        ASSERT_EQ(std::memcmp(o_cpu.data(), o_gpu.data(), o_cpu.size() * sizeof(float)), 0) << what;
      }
    }
  }
}

TEST(QuantizeGpu, FusedDequantizeDotEqualsTheCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  for (const QuantSpec& spec : testing::all_int_specs()) {
    for (int dist = 0; dist < testing::kValueDistCount; ++dist) {
      for (int seed = 0; seed < kSeedsPerCase; ++seed) {
        const auto [d, tokens] = int_case_shape(spec, seed);
        const std::vector<float> x = testing::make_values(static_cast<testing::ValueDist>(dist), tokens, d,
                                                          static_cast<std::uint64_t>(seed * 104729 + dist));
        const std::vector<float> q = testing::make_values(testing::ValueDist::kNormal, 1, d, static_cast<std::uint64_t>(seed + 1));
        const QuantizedBlock b = quantize_block(spec, x, tokens, d, {});
        std::vector<float> s_cpu(static_cast<std::size_t>(b.tokens)), s_gpu(static_cast<std::size_t>(b.tokens));
        dot_dequantized(spec, q, b.codes, b.scales, b.zeros, b.tokens, d, s_cpu);
        dot_dequantized_cuda(spec, q.data(), b.codes.data(), b.scales.data(), b.zeros.data(), b.tokens, d, s_gpu.data());
        ASSERT_EQ(std::memcmp(s_cpu.data(), s_gpu.data(), s_cpu.size() * sizeof(float)), 0)
            << int_case_name(spec, dist, seed);
      }
    }
  }
}

TEST(QuantizeGpu, Fp8CodesAndScaleEqualTheCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  for (int dist = 0; dist < testing::kValueDistCount; ++dist) {
    for (int seed = 0; seed < kSeedsPerCase; ++seed) {
      const std::int64_t tokens = 1 + seed * 11, d = 64;
      const std::vector<float> x = testing::make_values(static_cast<testing::ValueDist>(dist), tokens, d,
                                                        static_cast<std::uint64_t>(seed + 100 * dist));
      std::vector<std::uint8_t> c_cpu(x.size()), c_gpu(x.size());
      const float s_cpu = quantize_fp8_e4m3(x, tokens, d, {}, c_cpu);
      const float s_gpu = quantize_fp8_e4m3_cuda(x.data(), tokens, d, {}, c_gpu.data());
      ASSERT_EQ(std::memcmp(&s_cpu, &s_gpu, sizeof(float)), 0) << dist << " " << seed;
      ASSERT_EQ(c_cpu, c_gpu) << dist << " " << seed;
      std::vector<float> o_cpu(x.size()), o_gpu(x.size());
      dequantize_fp8_e4m3(c_cpu, s_cpu, o_cpu);
      dequantize_fp8_e4m3_cuda(c_cpu.data(), static_cast<std::int64_t>(c_cpu.size()), s_cpu, o_gpu.data());
      ASSERT_EQ(std::memcmp(o_cpu.data(), o_gpu.data(), o_cpu.size() * sizeof(float)), 0) << dist << " " << seed;
    }
  }
}

TEST(QuantizeGpu, RejectsNanWithTheCpuMessage) {
  KVCHECK_REQUIRE_GPU();
  std::vector<float> x(16 * 8, 1.0f);
  x[5 * 8 + 3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::uint8_t> codes(16 * 8);
  std::vector<std::uint16_t> meta(16 * 8);
  testing::expect_input_error(
      [&] { quantize_cuda(per_channel(2, 16), x.data(), 16, 8, {2, 1, 40, "key"}, codes.data(), meta.data(), meta.data()); },
      {"layer 2", "head 1", "token 45", "channel 3", "NaN"});
  testing::expect_input_error([&] { quantize_fp8_e4m3_cuda(x.data(), 16, 8, {2, 1, 40, "key"}, codes.data()); },
                              {"fp8-e4m3", "token 45", "NaN"});
}

}  // namespace
}  // namespace kvcheck
