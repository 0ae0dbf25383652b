// Paged decode attention, known answers worked out by hand (pages built by the page pool with
// poison on, so a dead slot read shows as NaN), and the errors it reports.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/paged_attention.h"
#include "kernels/quant_math.h"
#include "optimized/page_pool.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;

constexpr float kTol = 1e-6f;  // a handful of float roundings of O(1) values

std::vector<std::uint8_t> fp32_row(const std::vector<float>& x) {
  std::vector<std::uint8_t> row(x.size() * sizeof(float));
  std::memcpy(row.data(), x.data(), row.size());
  return row;
}

// The slot metadata of per-token INT: the fp16 (scale, zero) pair, as the kernel reads it.
std::vector<std::uint8_t> meta_pair(float scale, float zero) {
  const std::uint16_t pair[2] = {quant::f16_from_float(scale), quant::f16_from_float(zero)};
  std::vector<std::uint8_t> meta(sizeof pair);
  std::memcpy(meta.data(), pair, sizeof pair);
  return meta;
}

// A head with no pages and one residual token whose key and value are `residual` (head_dim
// entries): the input around a hand-built TierRead the kernel must refuse.
DecodeHeadInput residual_only(std::int64_t head_dim, float scale, std::span<const TierRead> tiers,
                              std::span<const std::uint16_t> residual, std::span<const float> q) {
  DecodeHeadInput in;
  in.head_dim = head_dim;
  in.scale = scale;
  in.tiers = tiers;
  in.residual_tokens = 1;
  in.residual_keys = residual;
  in.residual_values = residual;
  in.q = q;
  return in;
}

// A one-page pool of one tier, poisoned, and the kernel's view of it.
struct OnePage {
  std::int64_t head_dim;
  PagePool pool;
  std::vector<TierRead> tiers;
  std::vector<PageRead> pages;

  OnePage(const KvTier& tier, std::int64_t d, std::int64_t page_bytes)
      : head_dim(d), pool(PagePoolConfig{2, page_bytes, d, {tier}, true, true}) {
    pool.format(1, PageOwner{HeadKey{0, 0, 0}, 0});  // page 0 stays free (poisoned)
    tiers.push_back(make_tier_read(tier, d, page_bytes));
    pages.push_back(PageRead{pool.bytes(1).data(), pool.live_mask(1), 0});
  }
  void put(std::int64_t slot, const PagePool::SlotCodes& codes) {
    pool.put(1, slot, TokenPayload{static_cast<std::int32_t>(slot), 0.0f});
    pool.store_codes(1, slot, codes);
  }
  std::int64_t tokens() const { return pool.tokens_per_page(0); }
  DecodeHeadInput input(const std::vector<float>& q, float scale, std::int64_t group = 1) const {
    DecodeHeadInput in;
    in.head_dim = head_dim;
    in.group = group;
    in.scale = scale;
    in.tiers = tiers;
    in.pages = pages;
    in.q = q;
    return in;
  }
};

const KvTier kFp32Tier{fp32_format(), fp32_format()};

// Two fp32 tokens, q·k = 0 and ln 3: p = (1/4, 3/4), out = v0/4 + 3 v1/4.
OnePage two_fp32_tokens(bool dead_slot_between) {
  OnePage page(kFp32Tier, 4, 256);
  const float ln3 = std::log(3.0f);
  page.put(0, {fp32_row({0, 0, 0, 0}), {}, fp32_row({4, 0, 8, -4}), {}});
  std::int64_t second = 1;
  if (dead_slot_between) {
    page.put(1, {fp32_row({100, 100, 100, 100}), {}, fp32_row({100, 100, 100, 100}), {}});
    page.pool.kill(1, 1);  // evicted: its bytes are 0xFF poison now
    second = 2;
  }
  page.put(second, {fp32_row({ln3, 0, 0, 0}), {}, fp32_row({0, 4, 0, 4}), {}});
  return page;
}

TEST(PagedAttention, TwoFp32TokensByHand) {
  const OnePage page = two_fp32_tokens(false);
  ASSERT_GE(page.tokens(), 2);
  const std::vector<float> q{1, 0, 0, 0};
  std::vector<float> out(4), probs(static_cast<std::size_t>(page.tokens()), -1.0f);
  paged_decode_attention(page.input(q, 1.0f), {out, probs});
  const std::vector<float> want{1, 3, 2, 2};
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(out[c], want[c], kTol) << "channel " << c;
  EXPECT_NEAR(probs[0], 0.25f, kTol);
  EXPECT_NEAR(probs[1], 0.75f, kTol);
  for (std::size_t j = 2; j < probs.size(); ++j) EXPECT_EQ(probs[j], 0.0f) << "never-written slot " << j;
}

TEST(PagedAttention, DeadSlotBetweenLiveOnesIsSkipped) {
  const OnePage page = two_fp32_tokens(true);
  const std::vector<float> q{1, 0, 0, 0};
  std::vector<float> out(4), probs(static_cast<std::size_t>(page.tokens()), -1.0f);
  paged_decode_attention(page.input(q, 1.0f), {out, probs});
  const std::vector<float> want{1, 3, 2, 2};
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(out[c], want[c], kTol) << "channel " << c;
  EXPECT_NEAR(probs[0], 0.25f, kTol);
  EXPECT_EQ(probs[1], 0.0f);  // the dead slot
  EXPECT_NEAR(probs[2], 0.75f, kTol);
}

// int8 per-token codes whose dequantized values are exact: keys with ŝ = 0.5 and ẑ = -1 for the
// first token (code 2 is 0), ẑ = -2 for the second (code 4 is 0, code 6 is 1): different zeros,
// so the fused dot's ẑ Σ q term does not cancel in the softmax. Values with ŝ = 0.25, ẑ = 0
// (code 4c is c). q = (2, 0, ...), scale 0.5: logits 0 and 1, p = (1, e) / (1 + e);
// out_c = p0 (c + 1) + p1 * 2.
TEST(PagedAttention, Int8PageWithExactCodes) {
  const KvTier tier{int_format(per_token(8)), int_format(per_token(8))};
  OnePage page(tier, 8, 512);
  std::vector<std::uint8_t> k0(8, 2), k1(8, 4), v0(8), v1(8, 8);
  k1[0] = 6;
  for (int c = 0; c < 8; ++c) v0[c] = static_cast<std::uint8_t>(4 * (c + 1));
  // Slot 0 is never written (poison); the tokens sit in slots 1 and 3, slot 2 is evicted.
  page.put(1, {k0, meta_pair(0.5f, -1.0f), v0, meta_pair(0.25f, 0.0f)});
  page.put(2, {k1, meta_pair(0.5f, -2.0f), v1, meta_pair(0.25f, 0.0f)});
  page.pool.kill(1, 2);
  page.put(3, {k1, meta_pair(0.5f, -2.0f), v1, meta_pair(0.25f, 0.0f)});
  std::vector<float> q(8, 0.0f);
  q[0] = 2.0f;
  std::vector<float> out(8), probs(static_cast<std::size_t>(page.tokens()), -1.0f);
  paged_decode_attention(page.input(q, 0.5f), {out, probs});
  const double e = std::exp(1.0);
  const double p0 = 1.0 / (1.0 + e), p1 = e / (1.0 + e);
  for (int c = 0; c < 8; ++c) EXPECT_NEAR(out[c], p0 * (c + 1) + p1 * 2.0, 4 * kTol) << "channel " << c;
  EXPECT_EQ(probs[0], 0.0f);
  EXPECT_NEAR(probs[1], p0, kTol);
  EXPECT_EQ(probs[2], 0.0f);
  EXPECT_NEAR(probs[3], p1, kTol);
}

// No pages, two fp16 residual tokens, two query heads of one kv head (GQA): head 0 sees logits
// 0 and 1, head 1 logits 0 and 0.
TEST(PagedAttention, ResidualTokensAndGqaHeads) {
  auto h = [](float x) { return quant::f16_from_float(x); };
  const std::vector<std::uint16_t> keys{h(0), h(0), h(1), h(0)};
  const std::vector<std::uint16_t> values{h(1), h(2), h(3), h(4)};
  const std::vector<float> q{1, 0, 0, 1};
  DecodeHeadInput in;
  in.head_dim = 2;
  in.group = 2;
  in.scale = 1.0f;
  in.residual_tokens = 2;
  in.residual_keys = keys;
  in.residual_values = values;
  in.q = q;
  EXPECT_EQ(decode_slots(in), 2);
  std::vector<float> out(4), probs(4);
  paged_decode_attention(in, {out, probs});
  const double e = std::exp(1.0);
  const double p0 = 1.0 / (1.0 + e), p1 = e / (1.0 + e);
  EXPECT_NEAR(out[0], p0 * 1 + p1 * 3, kTol);
  EXPECT_NEAR(out[1], p0 * 2 + p1 * 4, kTol);
  EXPECT_NEAR(out[2], 2.0, kTol);
  EXPECT_NEAR(out[3], 3.0, kTol);
  EXPECT_NEAR(probs[0], p0, kTol);
  EXPECT_NEAR(probs[1], p1, kTol);
  EXPECT_NEAR(probs[2], 0.5, kTol);
  EXPECT_NEAR(probs[3], 0.5, kTol);
}

// One token attends to itself with probability 1, so out is its value exactly (0 + 1·v, / 1):
// every finite fp16 value (subnormals, ±0, ±65504) decodes to the float quant::f16_to_float gives,
// through the residual path and through an fp16 page.
TEST(PagedAttention, EveryFiniteFp16ValueDecodesExactly) {
  std::vector<std::uint16_t> finite;
  for (std::uint32_t h = 0; h < 0x10000U; ++h) {
    if ((h & 0x7C00U) != 0x7C00U) finite.push_back(static_cast<std::uint16_t>(h));
  }
  const std::int64_t d = 1024;
  finite.resize((finite.size() + d - 1) / d * d, 0);
  const KvTier fp16_tier{fp16_format(), fp16_format()};
  const std::vector<float> q(static_cast<std::size_t>(d), 0.0f);
  const std::vector<std::uint16_t> zero_key(static_cast<std::size_t>(d), 0);
  std::vector<float> out(static_cast<std::size_t>(d));
  for (std::size_t at = 0; at < finite.size(); at += static_cast<std::size_t>(d)) {
    const std::span<const std::uint16_t> values(finite.data() + at, static_cast<std::size_t>(d));
    DecodeHeadInput residual;
    residual.head_dim = d;
    residual.scale = 1.0f;
    residual.residual_tokens = 1;
    residual.residual_keys = zero_key;
    residual.residual_values = values;
    residual.q = q;
    paged_decode_attention(residual, {out, {}});
    for (std::int64_t c = 0; c < d; ++c) {
      ASSERT_EQ(out[static_cast<std::size_t>(c)], quant::f16_to_float(values[static_cast<std::size_t>(c)]))
          << "residual, fp16 bits " << values[static_cast<std::size_t>(c)];
    }
    OnePage page(fp16_tier, d, 16384);
    std::vector<std::uint8_t> key_row(static_cast<std::size_t>(2 * d), 0), value_row(key_row.size());
    std::memcpy(value_row.data(), values.data(), value_row.size());
    page.put(1, {key_row, {}, value_row, {}});
    paged_decode_attention(page.input(q, 1.0f), {out, {}});
    for (std::int64_t c = 0; c < d; ++c) {
      ASSERT_EQ(out[static_cast<std::size_t>(c)], quant::f16_to_float(values[static_cast<std::size_t>(c)]))
          << "page slot 1, fp16 bits " << values[static_cast<std::size_t>(c)];
    }
  }
}

// Walk order: page 0's slots, page 1's slots, then the residual; the same token anywhere along
// the walk gets the same probability.
TEST(PagedAttention, ProbsFollowTheWalkOrder) {
  OnePage first(kFp32Tier, 4, 256), second(kFp32Tier, 4, 256);
  first.put(0, {fp32_row({0, 0, 0, 0}), {}, fp32_row({1, 1, 1, 1}), {}});
  second.put(1, {fp32_row({0, 0, 0, 0}), {}, fp32_row({1, 1, 1, 1}), {}});
  const std::vector<std::uint16_t> residual(4, 0);  // one fp16 zero key and zero value
  const std::vector<PageRead> pages{first.pages[0], second.pages[0]};
  const std::vector<float> q{1, 2, 3, 4};
  DecodeHeadInput in = first.input(q, 0.5f);
  in.pages = pages;
  in.residual_tokens = 1;
  in.residual_keys = residual;
  in.residual_values = residual;
  const std::int64_t n = first.tokens();
  ASSERT_EQ(decode_slots(in), 2 * n + 1);
  std::vector<float> out(4), probs(static_cast<std::size_t>(2 * n + 1), -1.0f);
  paged_decode_attention(in, {out, probs});
  for (std::int64_t j = 0; j < 2 * n + 1; ++j) {
    const bool live = j == 0 || j == n + 1 || j == 2 * n;
    EXPECT_NEAR(probs[static_cast<std::size_t>(j)], live ? 1.0f / 3.0f : 0.0f, kTol) << "walk slot " << j;
  }
  for (int c = 0; c < 4; ++c) EXPECT_NEAR(out[c], 2.0f / 3.0f, kTol);
}

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(PagedAttention, NoLiveTokenIsAnError) {
  OnePage page(kFp32Tier, 4, 256);
  page.put(0, {fp32_row({0, 0, 0, 0}), {}, fp32_row({1, 1, 1, 1}), {}});
  page.pool.kill(1, 0);
  const std::vector<float> q{1, 0, 0, 0};
  std::vector<float> out(4);
  expect_input_error([&] { paged_decode_attention(page.input(q, 1.0f), {out, {}}); },
                     {"decode attention: no live token"});
  DecodeHeadInput nothing;
  nothing.head_dim = 4;
  nothing.scale = 1.0f;
  nothing.q = q;
  expect_input_error([&] { paged_decode_attention(nothing, {out, {}}); }, {"decode attention: no live token"});
}

TEST(PagedAttention, WrongSizesNameTheField) {
  OnePage page(kFp32Tier, 4, 256);
  page.put(0, {fp32_row({0, 0, 0, 0}), {}, fp32_row({1, 1, 1, 1}), {}});
  const std::vector<float> q{1, 0, 0, 0}, short_q{1, 0, 0};
  std::vector<float> out(4), short_out(3), bad_probs(static_cast<std::size_t>(page.tokens()) + 1);
  auto run = [&](const DecodeHeadInput& in, std::span<float> o, std::span<float> p) {
    paged_decode_attention(in, {o, p});
  };
  expect_input_error([&] { run(page.input(short_q, 1.0f), out, {}); }, {"decode attention", "q:"});
  expect_input_error([&] { run(page.input(q, 1.0f, 2), out, {}); }, {"decode attention", "q:", "group 2"});
  expect_input_error([&] { run(page.input(q, 1.0f), short_out, {}); }, {"decode attention", "out:"});
  expect_input_error([&] { run(page.input(q, 1.0f), out, bad_probs); }, {"decode attention", "probs:"});
  expect_input_error([&] { run(page.input(q, 0.0f), out, {}); }, {"decode attention", "scale:"});

  DecodeHeadInput residual = page.input(q, 1.0f);
  const std::vector<std::uint16_t> three(3, 0);
  residual.residual_tokens = 1;
  residual.residual_keys = three;
  residual.residual_values = three;
  expect_input_error([&] { run(residual, out, {}); }, {"decode attention", "residual_keys:"});

  DecodeHeadInput bad_tier = page.input(q, 1.0f);
  const std::vector<PageRead> tier_two{PageRead{page.pages[0].bytes, page.pages[0].live, 2}};
  bad_tier.pages = tier_two;
  expect_input_error([&] { run(bad_tier, out, {}); }, {"decode attention", "pages[0].tier"});

  DecodeHeadInput bad_live = page.input(q, 1.0f);
  const std::vector<PageRead> no_mask{PageRead{page.pages[0].bytes, {}, 0}};
  bad_live.pages = no_mask;
  expect_input_error([&] { run(bad_live, out, {}); }, {"decode attention", "pages[0].live"});

  // A TierRead made for another head_dim would read the wrong bytes: rejected.
  DecodeHeadInput wide = page.input(q, 1.0f);
  const std::vector<TierRead> other{make_tier_read(kFp32Tier, 8, 256)};
  wide.tiers = other;
  expect_input_error([&] { run(wide, out, {}); }, {"decode attention", "tiers[0]", "head_dim 4"});

  // A TierRead whose layout holds no token (built by hand) is refused even when no page uses it.
  TierRead empty = make_tier_read(kFp32Tier, 4, 256);
  empty.layout = PageLayout{};
  const std::vector<TierRead> empty_tiers{empty};
  const std::vector<std::uint16_t> zeros(4, 0);
  const DecodeHeadInput no_tokens = residual_only(4, 1.0f, empty_tiers, zeros, q);
  expect_input_error([&] { run(no_tokens, out, {}); }, {"decode attention", "tiers[0]"});
}

TEST(PagedAttention, UnsupportedFormatsAreErrors) {
  // Per-channel metadata is for keys (KIVI); values are read per token.
  const KvTier channel_values{int_format(per_token(4)), int_format(per_channel(2, 32))};
  expect_input_error([&] { (void)make_tier_read(channel_values, 16, 4096); },
                     {"decode attention", "value format", "int2/channel"});

  // A TierRead built by hand around make_tier_read is checked by the kernel too.
  TierRead by_hand;
  by_hand.tier = channel_values;
  by_hand.layout = page_layout(KvTier{int_format(per_token(4)), int_format(per_token(2))}, 16, 4096);
  by_hand.key_tiling = key_code_tiling(channel_values.key, 16);
  by_hand.value_tiling = value_code_tiling(channel_values.value, 16);
  const std::vector<TierRead> tiers{by_hand};
  const std::vector<std::uint16_t> residual(16, 0);
  const std::vector<float> q(16, 1.0f);
  std::vector<float> out(16);
  const DecodeHeadInput in = residual_only(16, 0.25f, tiers, residual, q);
  expect_input_error([&] { paged_decode_attention(in, {out, {}}); }, {"decode attention", "tiers[0]", "value format"});
}

// FP8 by hand: keys and values whose E4M3 codes are exact at the page scale 0.5 (amax 224 / 448):
// key 0 = (0, ...), key 1 = (2 ln 3 rounded to E4M3 ...) is not exact, so use q·k values that are:
// k0 = 0, k1 = (2, 0, ...) with q = (ln 3 / 2 ... ): the logits 0 and ln 3 are what the kernel
// computes from the decoded keys; values (224, 0, ...) and (0, 224, ...) are exact (code 0x7E = 448).
TEST(PagedAttention, Fp8PageUsesThePageScale) {
  const KvTier tier{fp8_e4m3_format(), fp8_e4m3_format()};
  OnePage page(tier, 8, 512);
  const float scale = 0.5f;
  auto row = [](std::initializer_list<std::uint8_t> first) {
    std::vector<std::uint8_t> r(8, 0);
    std::copy(first.begin(), first.end(), r.begin());
    return r;
  };
  std::vector<std::uint8_t> scale_bytes(4);
  std::memcpy(scale_bytes.data(), &scale, 4);
  // E4M3 0x40 = 2.0 (exponent 8 - 7 = 1, mantissa 0); 0x7E = 448.
  page.put(0, {row({}), scale_bytes, row({0x7E}), scale_bytes});
  page.put(1, {row({0x40}), scale_bytes, row({0, 0x7E}), scale_bytes});
  // k̂1 = (2 * 0.5, 0, ...) = (1, 0, ...): with q = (ln 3, 0, ...) and scale 1 the logits are 0, ln 3.
  const std::vector<float> q{std::log(3.0f), 0, 0, 0, 0, 0, 0, 0};
  std::vector<float> out(8), probs(static_cast<std::size_t>(page.tokens()));
  paged_decode_attention(page.input(q, 1.0f), {out, probs});
  EXPECT_NEAR(probs[0], 0.25f, kTol);
  EXPECT_NEAR(probs[1], 0.75f, kTol);
  EXPECT_NEAR(out[0], 224.0f * 0.25f, 224.0f * kTol);  // v̂0 = 448 * 0.5
  EXPECT_NEAR(out[1], 224.0f * 0.75f, 224.0f * kTol);
}

}  // namespace
}  // namespace kvcheck
