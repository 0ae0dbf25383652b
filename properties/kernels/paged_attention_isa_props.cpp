// Paged decode attention, bit for bit: the vectorized kernel (kernels/cpu/paged_attention.h) in
// its portable and AVX2 builds against each other and against a straightforward scalar restatement
// of its arithmetic kept here (paged_decode_attention_scalar). The kernel promises the same bits
// on every x86-64 (docs/design.md §7): the quick-report baseline and the committed sweep must
// reproduce on any machine, so no ISA may change a rounding.
//
// The scalar restatement reads each live slot's row through page_codes.h's load_key_row /
// load_value_row (not the kernel's own tiling walk), unpacks codes with bitpack.h, and does each
// element's operations and each sum in the order the kernel documents:
//   logit  = scale * row_ops::dot(q_g, k̂)      (8 lane sums, combined pairwise, plus the tail)
//            with per-token INT keys as s * dot(q_g, codes) + z * Σ_c q_gc
//   w      = exp(logit - max_g), Σ w in walk order
//   out_g += w * v̂ per element, slots in walk order; then out_g /= Σ w, probs = w / Σ w.
//   RC_PARAMS="seed=7 max_success=2000" build/properties/kvcheck_property_tests --gtest_filter='PagedAttentionIsa*'
#include <cstdlib>
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/bitpack.h"
#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/page_codes.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/row_ops.h"
#include "kernels/quant_math.h"
#include "properties/support/decode_cases.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::DecodeCase;

constexpr int kCases = 600;

float half(const std::uint8_t* p) {
  std::uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return quant::f16_to_float(h);
}

// One stored row (key or value) of a live slot as floats: the stored values, or for per-token INT
// keys (fused) the codes themselves, with the slot's (scale, zero) in *fused_meta.
std::vector<float> stored_row(const KvFormat& f, const CodeTiling& t, const std::uint8_t* page, const PageLayout& l,
                              bool key, std::int64_t slot, std::int64_t d, float* fused_meta) {
  const PageSegment codes = key ? l.key_codes : l.value_codes;
  const PageSegment meta = key ? l.key_meta : l.value_meta;
  std::vector<std::uint8_t> row(static_cast<std::size_t>(t.row_units * t.unit_bytes));
  const std::span<const std::uint8_t> segment(page + codes.offset, static_cast<std::size_t>(codes.bytes));
  if (key) load_key_row(segment, t, l.tokens, slot, row);
  else load_value_row(segment, t, l.tokens, slot, row);
  std::vector<float> x(static_cast<std::size_t>(d));
  for (std::int64_t c = 0; c < d; ++c) {
    float& v = x[static_cast<std::size_t>(c)];
    switch (f.dtype) {
      case KvDType::kFp32: std::memcpy(&v, row.data() + c * 4, 4); break;
      case KvDType::kFp16: v = half(row.data() + c * 2); break;
      case KvDType::kFp8E4M3: {
        float scale;
        std::memcpy(&scale, page + meta.offset, sizeof scale);
        v = quant::mul_rn(quant::e4m3_to_float(row[static_cast<std::size_t>(c)]), scale);
        break;
      }
      case KvDType::kInt: {
        const std::uint32_t code = packed_code(f.spec.bits, row.data(), c);
        const std::uint8_t* pair = nullptr;  // (scale, zero) fp16 pair of this element
        switch (f.spec.granularity) {
          case Granularity::kPerToken: pair = page + meta.offset + slot * 4; break;
          case Granularity::kPerTokenGroup:
            pair = page + meta.offset + (slot * (d / f.spec.group) + c / f.spec.group) * 4;
            break;
          case Granularity::kPerChannel: pair = page + meta.offset + ((slot / f.spec.group) * d + c) * 4; break;
        }
        if (key && f.spec.granularity == Granularity::kPerToken) {
          v = static_cast<float>(code);
          fused_meta[0] = half(pair);
          fused_meta[1] = half(pair + 2);
        } else {
          v = quant::dequantize_value(code, half(pair), half(pair + 2));
        }
        break;
      }
    }
  }
  return x;
}

std::vector<float> residual_row(std::span<const std::uint16_t> rows, std::int64_t r, std::int64_t d) {
  std::vector<float> x(static_cast<std::size_t>(d));
  for (std::int64_t c = 0; c < d; ++c) x[static_cast<std::size_t>(c)] = quant::f16_to_float(rows[static_cast<std::size_t>(r * d + c)]);
  return x;
}

bool live(const PageRead& p, std::int64_t slot) { return ((p.live[static_cast<std::size_t>(slot / 64)] >> (slot % 64)) & 1U) != 0; }

struct Run {
  std::vector<float> out, probs;
};

Run paged_decode_attention_scalar(const DecodeHeadInput& in) {
  const std::int64_t d = in.head_dim, G = in.group, slots = decode_slots(in);
  std::vector<float> q_sums(static_cast<std::size_t>(G), 0.0f);
  for (std::int64_t g = 0; g < G; ++g) {
    for (std::int64_t c = 0; c < d; ++c) q_sums[static_cast<std::size_t>(g)] += in.q[static_cast<std::size_t>(g * d + c)];
  }
  std::vector<float> w(static_cast<std::size_t>(G * slots), 0.0f);
  std::vector<float> maxima(static_cast<std::size_t>(G), -std::numeric_limits<float>::infinity());
  std::vector<float> sums(static_cast<std::size_t>(G), 0.0f);
  const auto logits_of = [&](const std::vector<float>& k, std::int64_t j, bool fused, const float* meta) {
    for (std::int64_t g = 0; g < G; ++g) {
      const float qk = row_ops::dot(in.q.data() + g * d, k.data(), d);
      const float raw = fused ? meta[0] * qk + meta[1] * q_sums[static_cast<std::size_t>(g)] : qk;
      const float logit = raw * in.scale;
      w[static_cast<std::size_t>(g * slots + j)] = logit;
      float& m = maxima[static_cast<std::size_t>(g)];
      if (logit > m) m = logit;
    }
  };
  Run r;
  r.out.assign(static_cast<std::size_t>(G * d), 0.0f);
  const auto accumulate = [&](const std::vector<float>& v, std::int64_t j) {
    for (std::int64_t g = 0; g < G; ++g) {
      float& l = w[static_cast<std::size_t>(g * slots + j)];
      l = std::exp(l - maxima[static_cast<std::size_t>(g)]);
      sums[static_cast<std::size_t>(g)] += l;
      row_ops::axpy(l, v.data(), r.out.data() + g * d, d);
    }
  };
  for (int pass = 0; pass < 2; ++pass) {
    std::int64_t j = 0;
    for (const PageRead& p : in.pages) {
      const TierRead& t = in.tiers[static_cast<std::size_t>(p.tier)];
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(p.bytes);
      for (std::int64_t slot = 0; slot < t.layout.tokens; ++slot) {
        if (!live(p, slot)) continue;
        float meta[2] = {1.0f, 0.0f};
        if (pass == 0) {
          const bool fused = t.tier.key.dtype == KvDType::kInt && t.tier.key.spec.granularity == Granularity::kPerToken;
          logits_of(stored_row(t.tier.key, t.key_tiling, bytes, t.layout, true, slot, d, meta), j + slot, fused, meta);
        } else {
          accumulate(stored_row(t.tier.value, t.value_tiling, bytes, t.layout, false, slot, d, meta), j + slot);
        }
      }
      j += t.layout.tokens;
    }
    for (std::int64_t k = 0; k < in.residual_tokens; ++k) {
      if (pass == 0) logits_of(residual_row(in.residual_keys, k, d), j + k, false, nullptr);
      else accumulate(residual_row(in.residual_values, k, d), j + k);
    }
  }
  r.probs.assign(w.size(), 0.0f);
  for (std::int64_t g = 0; g < G; ++g) {
    const float sum = sums[static_cast<std::size_t>(g)];
    for (std::int64_t c = 0; c < d; ++c) r.out[static_cast<std::size_t>(g * d + c)] /= sum;
    for (std::int64_t j = 0; j < slots; ++j) {
      r.probs[static_cast<std::size_t>(g * slots + j)] = w[static_cast<std::size_t>(g * slots + j)] / sum;
    }
  }
  return r;
}

Run run_kernel(const DecodeCase& c, LinearIsa isa) {
  Run r;
  r.out.assign(static_cast<std::size_t>(c.group * c.head_dim), -1.0f);
  r.probs.assign(static_cast<std::size_t>(c.group * c.slots), -1.0f);
  paged_decode_attention(c.input(), DecodeHeadOutput{r.out, r.probs}, isa);
  return r;
}

// The first differing float, for the failure message.
std::string first_difference(const std::vector<float>& a, const std::vector<float>& b, const char* what) {
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
      std::ostringstream s;
      s << what << "[" << i << "]: " << std::hexfloat << a[i] << " vs " << b[i] << "; ";
      return s.str();
    }
  }
  return "";
}

void assert_same_bits(const Run& a, const Run& b, const DecodeCase& c) {
  RC_ASSERT(a.out.size() == b.out.size());
  RC_ASSERT(a.probs.size() == b.probs.size());
  const std::string diff = first_difference(a.out, b.out, "out") + first_difference(a.probs, b.probs, "probs");
  if (!diff.empty()) RC_FAIL(diff + " (" + c.summary + ")");
}

// The default draws (head sizes 8 .. 256, powers of two) take the kernel's vector paths; these
// head sizes also take its scalar fallbacks (a key chunk or a value unit group that is not a whole
// number of 8-float lanes, a head size with a tail after the last lane).
constexpr std::int64_t kAwkwardDims[] = {4, 12, 20, 24, 40};

DecodeCase draw_case(bool awkward) {
  return awkward ? testing::draw_decode_case(128, 8, kAwkwardDims) : testing::draw_decode_case();
}

void portable_is_scalar(bool awkward) {
  check_property(std::string("paged decode attention/portable == scalar restatement") + (awkward ? ", awkward head sizes" : ""),
                 kCases, [awkward] {
                   const DecodeCase c = draw_case(awkward);
                   assert_same_bits(run_kernel(c, LinearIsa::kPortable), paged_decode_attention_scalar(c.input()), c);
                 });
}

// A wider build (AVX2 + F16C, AVX-512) against the portable build and the scalar restatement.
void wide_build_is_portable(LinearIsa isa, bool awkward) {
  check_property(std::string("paged decode attention/") + linear_isa_name(isa) + " == portable == scalar restatement" +
                     (awkward ? ", awkward head sizes" : ""),
                 kCases, [isa, awkward] {
                   const DecodeCase c = draw_case(awkward);
                   const Run wide = run_kernel(c, isa);
                   assert_same_bits(wide, run_kernel(c, LinearIsa::kPortable), c);
                   assert_same_bits(wide, paged_decode_attention_scalar(c.input()), c);
                 });
}

TEST(PagedAttentionIsaProps, PortableBuildIsTheScalarArithmeticBitForBit) {
  portable_is_scalar(false);
  portable_is_scalar(true);
}

TEST(PagedAttentionIsaProps, Avx2BuildIsBitIdenticalToPortable) {
  if (!linear_isa_available(LinearIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2 + F16C";
  wide_build_is_portable(LinearIsa::kAvx2, false);
  wide_build_is_portable(LinearIsa::kAvx2, true);
}

// The sixteen-lane key dots (query heads in pairs) and value accumulators (two lane groups of a
// head side by side): a swapped half or a pair read from the wrong head changes bits here.
TEST(PagedAttentionIsaProps, Avx512BuildIsBitIdenticalToPortable) {
  if (!linear_isa_available(LinearIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512 (F, VL, BW, DQ)";
  wide_build_is_portable(LinearIsa::kAvx512, false);
  wide_build_is_portable(LinearIsa::kAvx512, true);
}

TEST(PagedAttentionIsa, DefaultIsTheFastestAvailable) {
  if (std::getenv("KVCHECK_ISA") != nullptr) GTEST_SKIP() << "KVCHECK_ISA caps the choice in this run";
  const LinearIsa widest = linear_isa_available(LinearIsa::kAvx512) ? LinearIsa::kAvx512
                           : linear_isa_available(LinearIsa::kAvx2)  ? LinearIsa::kAvx2
                                                                     : LinearIsa::kPortable;
  EXPECT_EQ(paged_decode_isa(), widest);
}

}  // namespace
}  // namespace kvcheck
