// Properties of the KV quantizers, for every format, over every value distribution of
// properties/support/quant_cases.h. Each property runs at least kGateCases cases per format in
// the gate; RC_PARAMS="max_success=100000" lengthens every one of them:
//   RC_PARAMS="seed=7 max_success=100000" build/properties/kvcheck_property_tests --gtest_filter='QuantizeProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/bitpack.h"
#include "kernels/cpu/fp8_e4m3.h"
#include "kernels/cpu/quantize.h"
#include "oracles/quant_bounds.h"
#include "oracles/quantize_ref.h"
#include "properties/support/property_check.h"
#include "properties/support/quant_cases.h"
#include "reference/tensor.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::ValueDist;

constexpr int kGateCases = 1000;

// One random block for a format: small shapes so that a thousand cases per format stay cheap.
struct Block {
  std::int64_t tokens = 0, head_dim = 0;
  ValueDist dist = ValueDist::kNormal;
  std::vector<float> x;
};

Block draw_block(const QuantSpec& spec) {
  Block b;
  // head_dim: multiples of 4 (the 2-bit packing factor); per-group specs need multiples of g.
  const std::int64_t unit = spec.granularity == Granularity::kPerTokenGroup ? spec.group : 4;
  b.head_dim = unit * *rc::gen::inRange<std::int64_t>(1, spec.granularity == Granularity::kPerChannel ? 5 : 9);
  b.tokens = spec.token_group() * *rc::gen::inRange<std::int64_t>(1, spec.granularity == Granularity::kPerChannel ? 3 : 9);
  b.dist = static_cast<ValueDist>(*rc::gen::inRange(0, testing::kValueDistCount));
  b.x = testing::make_values(b.dist, b.tokens, b.head_dim, *rc::gen::arbitrary<std::uint64_t>());
  RC_CLASSIFY(true, testing::value_dist_name(b.dist));
  return b;
}

struct Quantized {
  std::vector<std::uint8_t> codes;
  std::vector<std::uint16_t> scales, zeros;
};

Quantized run_quantize(const QuantSpec& spec, const std::vector<float>& x, std::int64_t tokens, std::int64_t d) {
  Quantized q;
  q.codes.resize(static_cast<std::size_t>(tokens * spec.row_bytes(d)));
  q.scales.resize(static_cast<std::size_t>(spec.meta_count(tokens, d)));
  q.zeros.resize(q.scales.size());
  quantize(spec, x, tokens, d, KvLocation{}, q.codes, q.scales, q.zeros);
  return q;
}

std::vector<float> run_dequantize(const QuantSpec& spec, const Quantized& q, std::int64_t tokens, std::int64_t d) {
  std::vector<float> out(static_cast<std::size_t>(tokens * d));
  dequantize(spec, q.codes, q.scales, q.zeros, tokens, d, out);
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Equal as floats (+0 == -0): the format does not promise the sign of a zero.
bool same_values(const std::vector<float>& a, const std::vector<float>& b) { return a == b; }

TEST(QuantizeProps, ElementBoundHolds) {
  for (const QuantSpec& spec : testing::all_int_specs()) {
    check_property(quant_spec_name(spec) + "/bound", kGateCases, [spec] {
      const Block b = draw_block(spec);
      const Quantized q = run_quantize(spec, b.x, b.tokens, b.head_dim);
      const std::vector<float> x_hat = run_dequantize(spec, q, b.tokens, b.head_dim);
      const std::string violation = check_int_quant_bound(spec, b.x, x_hat, q.scales, q.zeros, b.tokens, b.head_dim);
      RC_ASSERT(violation == std::string());
    });
  }
}

TEST(QuantizeProps, FastPathEqualsRefBitForBit) {
  for (const QuantSpec& spec : testing::all_int_specs()) {
    check_property(quant_spec_name(spec) + "/fast-equals-ref", kGateCases, [spec] {
      const Block b = draw_block(spec);
      const Quantized q = run_quantize(spec, b.x, b.tokens, b.head_dim);
      const QuantizedRef r = quantize_ref(spec, b.x, b.tokens, b.head_dim);
      RC_ASSERT(q.codes == r.codes);
      RC_ASSERT(q.scales == r.scales);
      RC_ASSERT(q.zeros == r.zeros);
      RC_ASSERT(same_bits(run_dequantize(spec, q, b.tokens, b.head_dim), dequantize_ref(spec, r, b.tokens, b.head_dim)));
      // The fp16-input path equals the float path on the same (fp16) values.
      std::vector<std::uint16_t> h(b.x.size());
      std::vector<float> hf(b.x.size());
      for (std::size_t i = 0; i < h.size(); ++i) {
        hf[i] = f16_bits_to_float(h[i] = float_to_f16_bits(std::clamp(b.x[i], -65504.0f, 65504.0f)));
      }
      const Quantized qf = run_quantize(spec, hf, b.tokens, b.head_dim);
      Quantized qh = qf;
      quantize_f16(spec, h, b.tokens, b.head_dim, KvLocation{}, qh.codes, qh.scales, qh.zeros);
      RC_ASSERT(qh.codes == qf.codes);
      RC_ASSERT(qh.scales == qf.scales);
      RC_ASSERT(qh.zeros == qf.zeros);
    });
  }
}

// The per-token statistics run eight lanes at a time; which of -0 and +0 is a row's minimum (or
// maximum) depends on which comes first, and the stored zero keeps that sign. Rows whose extreme
// is a zero, both zeros scattered through them, still give the reference's bits.
TEST(QuantizeProps, ZeroExtremesKeepTheReferenceBits) {
  for (const QuantSpec& spec : testing::all_int_specs()) {
    if (spec.granularity == Granularity::kPerChannel) continue;
    check_property(quant_spec_name(spec) + "/zero extremes", 300, [spec] {
      const std::int64_t unit = spec.granularity == Granularity::kPerTokenGroup ? spec.group : 16;
      const std::int64_t d = unit * *rc::gen::inRange<std::int64_t>(1, 9);
      const std::int64_t tokens = *rc::gen::inRange<std::int64_t>(1, 4);
      const float sign = *rc::gen::arbitrary<bool>() ? 1.0f : -1.0f;  // zeros are the minimum, or the maximum
      std::vector<float> x(static_cast<std::size_t>(tokens * d));
      for (float& v : x) {
        const int pick = *rc::gen::inRange(0, 3);
        v = pick == 0 ? 0.0f : pick == 1 ? -0.0f : sign * static_cast<float>(*rc::gen::inRange(1, 100)) / 64.0f;
      }
      const Quantized q = run_quantize(spec, x, tokens, d);
      const QuantizedRef r = quantize_ref(spec, x, tokens, d);
      RC_ASSERT(q.codes == r.codes);
      RC_ASSERT(q.scales == r.scales);
      RC_ASSERT(q.zeros == r.zeros);
    });
  }
}

TEST(QuantizeProps, QuantizingDequantizedValuesIsExact) {
  for (const QuantSpec& spec : testing::all_int_specs()) {
    check_property(quant_spec_name(spec) + "/idempotent", kGateCases, [spec] {
      Block b = draw_block(spec);
      // On fp16 values, as a KV cache holds them. (From arbitrary floats the min of a narrow,
      // offset group can sit more than ŝ/2 above the fp16 zero below it: its code is then not 0
      // and the second pass rounds its zero from a different value.)
      for (float& v : b.x) v = f16_bits_to_float(float_to_f16_bits(std::clamp(v, -65504.0f, 65504.0f)));
      const Quantized q = run_quantize(spec, b.x, b.tokens, b.head_dim);
      const std::vector<float> x_hat = run_dequantize(spec, q, b.tokens, b.head_dim);
      const std::vector<float> again = run_dequantize(spec, run_quantize(spec, x_hat, b.tokens, b.head_dim), b.tokens, b.head_dim);
      // Exact whenever every scale is 0 or a normal fp16 number: then the covering scale is
      // within 2^-10 of (max - min) / L, the maximum gets code L, the minimum code 0, and the
      // second pass finds the same ẑ and ŝ. A subnormal fp16 scale (ranges below about
      // (2^b - 1) * 2^-14) has steps up to 1/L of itself: the maximum can land on code L - 1 and
      // the second pass then picks a smaller scale. Those cases are counted, not asserted.
      bool normal_scales = true;
      for (const std::uint16_t s : q.scales) normal_scales = normal_scales && (s == 0 || (s & 0x7C00) != 0);
      RC_CLASSIFY(!normal_scales, "subnormal fp16 scale: exactness not claimed");
      if (normal_scales) RC_ASSERT(same_values(again, x_hat));
    });
  }
}

TEST(QuantizeProps, DequantizationIsMonotoneInTheCode) {
  for (const QuantSpec& spec : testing::all_int_specs()) {
    check_property(quant_spec_name(spec) + "/monotone", kGateCases, [spec] {
      const Block b = draw_block(spec);
      Quantized q = run_quantize(spec, b.x, b.tokens, b.head_dim);
      // Every element at code k, then at k + 1, under the block's own metadata: the ends of the
      // code range and a few codes between (all 255 steps of 8 bits would dominate the gate).
      std::vector<int> ks = {0, spec.levels() - 1};
      for (int i = 0; i < 4; ++i) ks.push_back(*rc::gen::inRange(0, spec.levels()));
      std::vector<std::uint8_t> all_k(static_cast<std::size_t>(b.tokens * b.head_dim));
      for (const int k : ks) {
        std::fill(all_k.begin(), all_k.end(), static_cast<std::uint8_t>(k));
        pack_codes(spec.bits, all_k, q.codes);
        const std::vector<float> lower = run_dequantize(spec, q, b.tokens, b.head_dim);
        std::fill(all_k.begin(), all_k.end(), static_cast<std::uint8_t>(k + 1));
        pack_codes(spec.bits, all_k, q.codes);
        const std::vector<float> upper = run_dequantize(spec, q, b.tokens, b.head_dim);
        for (std::size_t i = 0; i < upper.size(); ++i) RC_ASSERT(lower[i] <= upper[i]);
      }
    });
  }
}

TEST(QuantizeProps, PackUnpackRoundTrips) {
  for (const int bits : {8, 4, 2}) {
    check_property("int" + std::to_string(bits) + "/pack", kGateCases, [bits] {
      const int per_byte = 8 / bits;
      const auto bytes = *rc::gen::inRange<std::size_t>(0, 200);
      // Contents from a seed: RapidCheck's element-wise containers are slow at this size.
      std::uint64_t state = *rc::gen::arbitrary<std::uint64_t>();
      auto next_byte = [&state] {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        return static_cast<std::uint8_t>(state >> 56);
      };
      std::vector<std::uint8_t> codes(bytes * static_cast<std::size_t>(per_byte)), raw(bytes);
      for (auto& c : codes) c = static_cast<std::uint8_t>(next_byte() >> (8 - bits));
      for (auto& r : raw) r = next_byte();
      std::vector<std::uint8_t> packed(bytes), back(codes.size());
      pack_codes(bits, codes, packed);
      unpack_codes(bits, packed, back);
      RC_ASSERT(back == codes);
      for (std::size_t i = 0; i < codes.size(); ++i) {
        RC_ASSERT(packed_code(bits, packed.data(), static_cast<std::int64_t>(i)) == codes[i]);
      }
      // And every byte is a valid packing: unpack then pack gives the byte back.
      std::vector<std::uint8_t> unpacked(raw.size() * static_cast<std::size_t>(per_byte)), repacked(raw.size());
      unpack_codes(bits, raw, unpacked);
      pack_codes(bits, unpacked, repacked);
      RC_ASSERT(repacked == raw);
    });
  }
}

TEST(QuantizeProps, FusedDotMatchesDotOfDequantized) {
  for (const QuantSpec& spec : testing::all_int_specs()) {
    check_property(quant_spec_name(spec) + "/fused-dot", kGateCases, [spec] {
      const Block b = draw_block(spec);
      const Quantized q = run_quantize(spec, b.x, b.tokens, b.head_dim);
      const std::vector<float> x_hat = run_dequantize(spec, q, b.tokens, b.head_dim);
      const std::vector<float> query =
          testing::make_values(ValueDist::kNormal, 1, b.head_dim, *rc::gen::arbitrary<std::uint64_t>());
      std::vector<float> scores(static_cast<std::size_t>(b.tokens));
      dot_dequantized(spec, query, q.codes, q.scales, q.zeros, b.tokens, b.head_dim, scores);
      const std::int64_t groups = spec.granularity == Granularity::kPerTokenGroup ? b.head_dim / spec.group : 1;
      for (std::int64_t t = 0; t < b.tokens; ++t) {
        double exact = 0.0, magnitude = 0.0;
        for (std::int64_t c = 0; c < b.head_dim; ++c) {
          std::int64_t m = t;
          if (spec.granularity == Granularity::kPerChannel) m = t / spec.group * b.head_dim + c;
          if (spec.granularity == Granularity::kPerTokenGroup) m = t * groups + c / spec.group;
          const double xh = x_hat[static_cast<std::size_t>(t * b.head_dim + c)];
          const double z = std::fabs(double{f16_bits_to_float(q.zeros[m])});
          exact += double{query[c]} * xh;
          magnitude += std::fabs(double{query[c]}) * (std::fabs(xh) + 2.0 * z);
        }
        RC_ASSERT(std::fabs(double{scores[t]} - exact) <= fused_dot_tolerance(b.head_dim, magnitude));
      }
    });
  }
}

// ---------------------------------------------------------------------------------------------
// FP8 E4M3 with a per-head scale. Any finite magnitude is allowed: stretch the huge case.

Block draw_fp8_block() {
  Block b = draw_block(per_token(8));
  if (*rc::gen::inRange(0, 4) == 0) {
    const float stretch = std::ldexp(1.0f, *rc::gen::inRange(-100, 100));
    for (float& v : b.x) v *= stretch;
  }
  return b;
}

TEST(QuantizeProps, Fp8RelativeBoundAndRef) {
  check_property("fp8-e4m3/bound-and-ref", kGateCases, [] {
    const Block b = draw_fp8_block();
    std::vector<std::uint8_t> codes(b.x.size());
    const float scale = quantize_fp8_e4m3(b.x, b.tokens, b.head_dim, KvLocation{}, codes);
    std::vector<float> x_hat(b.x.size());
    dequantize_fp8_e4m3(codes, scale, x_hat);
    RC_ASSERT(check_fp8_bound(b.x, x_hat, scale, b.head_dim) == std::string());
    const Fp8Ref r = quantize_fp8_e4m3_ref(b.x);
    RC_ASSERT(std::memcmp(&scale, &r.scale, sizeof scale) == 0);
    RC_ASSERT(codes == r.codes);
    RC_ASSERT(same_bits(x_hat, dequantize_fp8_e4m3_ref(r)));
    // Idempotence: the dequantized block quantizes back to itself.
    std::vector<std::uint8_t> codes2(codes.size());
    const float scale2 = quantize_fp8_e4m3(x_hat, b.tokens, b.head_dim, KvLocation{}, codes2);
    std::vector<float> again(x_hat.size());
    dequantize_fp8_e4m3(codes2, scale2, again);
    RC_ASSERT(same_values(again, x_hat));
  });
}

TEST(QuantizeProps, Fp8DecodeIsMonotone) {
  // Exhaustive rather than random: 126 positive finite codes.
  for (int c = 1; c <= 0x7E; ++c) {
    const float s = 0.37f;
    std::vector<float> out(2);
    const std::vector<std::uint8_t> pair = {static_cast<std::uint8_t>(c - 1), static_cast<std::uint8_t>(c)};
    dequantize_fp8_e4m3(pair, s, out);
    EXPECT_LT(out[0], out[1]) << "code " << c;
    const std::vector<std::uint8_t> neg = {static_cast<std::uint8_t>(0x80 | c), static_cast<std::uint8_t>(0x80 | (c - 1))};
    dequantize_fp8_e4m3(neg, s, out);
    EXPECT_LT(out[0], out[1]) << "code -" << c;
  }
}

}  // namespace
}  // namespace kvcheck
