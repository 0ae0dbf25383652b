// Bytes accounting: hand-computed per-token sizes, page layouts, and the KV-size formulas of
// MiniKV's appendix I (/work/shared/papers/002_*: full fp16, KIVI-2, Q-Hitter INT4, MiniKV).
#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/cpu/kv_bytes.h"
#include "kernels/quant_math.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

TEST(KvBytes, PerTokenPerHeadByFormat) {
  const std::int64_t d = 128;
  EXPECT_EQ(format_bytes(fp32_format(), d).bytes_per_token(), 512.0);
  EXPECT_EQ(format_bytes(fp16_format(), d).bytes_per_token(), 256.0);
  EXPECT_EQ(format_bytes(fp8_e4m3_format(), d).bytes_per_token(), 128.0);
  EXPECT_EQ(format_bytes(fp8_e4m3_format(), d).meta_bytes_per_page, 4);
  // Per token: d * b / 8 codes + fp16 scale + fp16 zero.
  EXPECT_EQ(format_bytes(int_format(per_token(8)), d).bytes_per_token(), 128.0 + 4.0);
  EXPECT_EQ(format_bytes(int_format(per_token(4)), d).bytes_per_token(), 64.0 + 4.0);
  EXPECT_EQ(format_bytes(int_format(per_token(2)), d).bytes_per_token(), 32.0 + 4.0);
  // Per channel over G tokens: d pairs per G tokens.
  const FormatBytes kivi = format_bytes(int_format(per_channel(2, 32)), d);
  EXPECT_EQ(kivi.tokens_per_unit, 32);
  EXPECT_EQ(kivi.meta_bytes_per_unit, 4 * 128);
  EXPECT_EQ(kivi.bytes_per_token(), 32.0 + 16.0);
  EXPECT_EQ(format_bytes(int_format(per_channel(2, 128)), d).bytes_per_token(), 32.0 + 4.0);
  // Per group of g channels: d / g pairs per token.
  EXPECT_EQ(format_bytes(int_format(per_token_group(4, 32)), d).bytes_per_token(), 64.0 + 16.0);
  // Fractional amortised metadata: d = 8, G = 128 -> 32 bytes per 128 tokens.
  EXPECT_EQ(format_bytes(int_format(per_channel(2, 128)), 8).bytes_per_token(), 2.0 + 0.25);
}

TEST(KvBytes, LeanKvTiers) {
  const KvTier k8v4{int_format(per_token(8)), int_format(per_token(4))};
  const KvTier k4v2{int_format(per_token(4)), int_format(per_token(2))};
  EXPECT_EQ(tier_bytes_per_token(k8v4, 128), 132.0 + 68.0);
  EXPECT_EQ(tier_bytes_per_token(k4v2, 128), 68.0 + 36.0);
  EXPECT_EQ(tier_bytes_per_token({fp16_format(), fp16_format()}, 128), 512.0);
}

TEST(KvBytes, PageLayoutHandComputed) {
  // K8V4, d = 128, 16 KiB: 208 bytes per token with score and position -> at most 78 tokens, but
  // the int4 values are tiled in vectors of 4 tokens, so a multiple of 4: 76.
  // 76: key codes 9728 @0, key meta 304 @9728, value codes 4864 @10032, value meta 304 @14896,
  // scores 304 @15200, positions 304 @15504 -> 15808 <= 16384. 80 would need 16640.
  const KvTier k8v4{int_format(per_token(8)), int_format(per_token(4))};
  const PageLayout p = page_layout(k8v4, 128, 16384);
  EXPECT_EQ(p.tokens, 76);
  EXPECT_EQ(p.key_codes.offset, 0);
  EXPECT_EQ(p.key_codes.bytes, 9728);
  EXPECT_EQ(p.key_meta.offset, 9728);
  EXPECT_EQ(p.key_meta.bytes, 304);
  EXPECT_EQ(p.value_codes.offset, 10032);
  EXPECT_EQ(p.value_meta.offset, 14896);
  EXPECT_EQ(p.scores.offset, 15200);
  EXPECT_EQ(p.positions.offset, 15504);
  EXPECT_EQ(p.used_bytes, 15808);
  // A lower tier holds more tokens.
  const KvTier k4v2{int_format(per_token(4)), int_format(per_token(2))};
  EXPECT_GT(tokens_per_page(k4v2, 128, 16384), p.tokens);
  // fp16 K and V, d = 128: 520 bytes per token -> 31 tokens fit, fp16 values are tiled in pairs
  // of tokens -> 30 (positions end at 15608).
  EXPECT_EQ(tokens_per_page({fp16_format(), fp16_format()}, 128, 16384), 30);
}

// A key-range tier's stored range (Quest) at every head size down to one channel: cleared, it
// widens to the keys written and reads back as their per-channel min and max (fp16 values).
TEST(KvBytes, KeyRangeWidensAndReadsBackAtEveryHeadSize) {
  for (const std::int64_t d : {1, 2, 8}) {
    const PageLayout layout = page_layout(KvTier{fp16_format(), fp16_format(), true}, d, 1024);
    std::vector<std::byte> page(1024);
    clear_page_key_range(layout, page.data());
    for (const float k : {0.5f, -2.0f, 1.25f}) {
      widen_page_key_range(layout, page.data(), std::vector<std::uint16_t>(static_cast<std::size_t>(d), quant::f16_from_float(k)));
    }
    std::vector<float> lo(static_cast<std::size_t>(d)), hi(lo.size());
    ASSERT_NO_THROW(read_page_key_range(layout, page.data(), lo, hi)) << "head_dim " << d;
    EXPECT_EQ(lo, std::vector<float>(lo.size(), -2.0f)) << "head_dim " << d;
    EXPECT_EQ(hi, std::vector<float>(hi.size(), 1.25f)) << "head_dim " << d;
  }
}

TEST(KvBytes, PerChannelPagesHoldWholeGroups) {
  // KIVI-2: keys per channel G = 32, values per token; d = 128. Per 32 tokens: key codes 1024 +
  // key meta 512, value codes 1024 + value meta 128, scores 128, positions 128 = 2944 bytes.
  const KvTier kivi{int_format(per_channel(2, 32)), int_format(per_token(2))};
  const PageLayout p = page_layout(kivi, 128, 16384);
  EXPECT_EQ(p.tokens % 32, 0);
  EXPECT_EQ(p.tokens, 160);  // 5 groups: 14720 bytes; 6 would need 17664
  EXPECT_EQ(p.used_bytes, 5 * 2944);
  testing::expect_input_error([&] { page_layout(kivi, 128, 2048); }, {"unified page", "page_bytes", "2048"});
}

TEST(KvBytes, MiniKvAppendixFormulas) {
  // Llama-2-7B: 32 layers, hidden 4096 = 32 heads x 128; prompt 4096, generation 512.
  const std::int64_t layers = 32, heads = 32, d = 128;
  const double prompt = 4096, gen = 512, hidden = 4096;
  // Full model: 2 (K, V) x (H x d) x (l_prompt + l_gen) x 2 bytes = 2.4 GB.
  const double full = kv_cache_bytes({fp16_format(), fp16_format()}, layers, heads, d, prompt + gen);
  EXPECT_EQ(full, 2.0 * layers * hidden * (prompt + gen) * 2.0);
  EXPECT_NEAR(full / 1e9, 2.4, 0.02);
  // KIVI with groups of 16 scalars at 2 bits + fp16 scale and zero: 8 bytes per 16 values, so
  // the cache is (H x d) x (l_prompt + l_gen) bytes. Keys per channel over G = 16 tokens,
  // values per group of 16 channels.
  const KvTier kivi16{int_format(per_channel(2, 16)), int_format(per_token_group(2, 16))};
  EXPECT_EQ(kv_cache_bytes(kivi16, layers, heads, d, prompt + gen), layers * hidden * (prompt + gen));
  // MiniKV: KIVI-2 on a budget of alpha_HH + alpha_RW = 50% of the prompt, all generated
  // tokens kept: (H x d)(alpha l_prompt) + (H x d) l_gen = 0.33 GB, an 86% reduction.
  const double minikv = kv_cache_bytes(kivi16, layers, heads, d, 0.5 * prompt + gen);
  EXPECT_EQ(minikv, layers * hidden * 0.5 * prompt + layers * hidden * gen);
  EXPECT_NEAR(minikv / 1e9, 0.33, 0.01);
  EXPECT_NEAR(1.0 - minikv / full, 0.86, 0.01);
  // Q-Hitter: INT4 per token per head with fp16 scale and zero: compression
  // (d x 16) / (d x 4 + 2 x 16) = 3.76 for d = 128.
  const KvTier int4{int_format(per_token(4)), int_format(per_token(4))};
  const double ratio = tier_bytes_per_token({fp16_format(), fp16_format()}, d) / tier_bytes_per_token(int4, d);
  EXPECT_EQ(ratio, (128.0 * 16) / (128.0 * 4 + 2 * 16));
  EXPECT_NEAR(ratio, 3.76, 0.005);
}

}  // namespace
}  // namespace kvcheck
