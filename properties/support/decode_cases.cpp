// Random paged decode-attention cases (properties/support/decode_cases.h).
#include "properties/support/decode_cases.h"

#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/page_encode.h"
#include "kernels/cpu/quantize.h"
#include "kernels/quant_math.h"
#include "properties/support/quant_cases.h"
#include "reference/errors.h"

namespace kvcheck::testing {
namespace {

std::int64_t tokens_or_zero(const KvTier& tier, std::int64_t head_dim, std::int64_t page_bytes) {
  try {
    return tokens_per_page(tier, head_dim, page_bytes);
  } catch (const InputError&) {
    return 0;
  }
}

// The smallest page size whose tier 0 holds at least `target` tokens (tokens per page are
// multiples of the value tiling's vec, so 1, 3 and 7 are exact only for fp32 values), grown in
// steps of the segment alignment until the lower tier holds at least as many (or, after 64
// steps, at least one unit).
std::int64_t page_bytes_for(const std::vector<KvTier>& tiers, std::int64_t head_dim, std::int64_t target) {
  std::int64_t lo = 1, hi = 1 << 22;
  while (lo < hi) {
    const std::int64_t mid = (lo + hi) / 2;
    if (tokens_or_zero(tiers[0], head_dim, mid) >= target) hi = mid;
    else lo = mid + 1;
  }
  // Bounded: at some head sizes a later tier of the catalogue takes more bytes per token (per-channel
  // 4-bit keys with grouped 4-bit values against K8V4 at head_dim 128) and never catches up; the
  // kernel reads any pair, so the case stands as it is.
  std::int64_t bytes = lo;
  for (int step = 0; tiers.size() > 1; ++step) {
    const std::int64_t low = tokens_or_zero(tiers[1], head_dim, bytes);
    if (low > 0 && (low >= tokens_or_zero(tiers[0], head_dim, bytes) || step >= 64)) break;
    bytes += kPageSegmentAlign;
  }
  return bytes;
}

// One page's worth of keys or values stored as an engine stores them (kernels/cpu/page_encode.h:
// code rows, slot metadata, per-channel group metadata, FP8's page scale), and x̂.
struct EncodedPage {
  EncodedBlock block;
  std::vector<float> x_hat;
  std::vector<float> zero;  // per row: |ẑ| of per-token INT keys (the fused dot's error term), else 0
};

EncodedPage encode_page(const KvFormat& f, std::span<const float> x, std::int64_t rows, std::int64_t d) {
  EncodedPage e;
  e.block = encode_block(f, x, rows, d, KvLocation{});
  e.x_hat = decode_block(f, e.block, d);
  e.zero.assign(static_cast<std::size_t>(rows), 0.0f);
  if (f.dtype == KvDType::kInt && f.spec.granularity == Granularity::kPerToken) {
    for (std::int64_t r = 0; r < rows; ++r) {
      std::uint16_t zero = 0;
      std::memcpy(&zero, e.block.meta(r).data() + 2, 2);
      e.zero[static_cast<std::size_t>(r)] = std::fabs(quant::f16_to_float(zero));
    }
  }
  return e;
}

std::vector<std::uint8_t> to_vector(std::span<const std::uint8_t> s) { return {s.begin(), s.end()}; }

std::vector<float> draw_keys(std::int64_t tokens, std::int64_t d, std::uint64_t seed) {
  // Keys like real ones: normal, heavy-tailed with outlier channels (scaled down so logits stay in
  // a range where the softmax is not one-hot), or a narrow range away from zero (large INT zeros).
  const int which = *rc::gen::inRange(0, 3);
  const ValueDist dist = which == 0   ? ValueDist::kNormal
                                  : which == 1 ? ValueDist::kOutlierChannels
                                               : ValueDist::kUniform;
  std::vector<float> k = make_values(dist, tokens, d, seed);
  if (dist == ValueDist::kOutlierChannels) {
    for (float& x : k) x *= 0.05f;
  }
  RC_CLASSIFY(true, value_dist_name(dist));
  return k;
}

}  // namespace

// The tiers of the issue, from the most bytes per token to the fewest (so a pool's tier 0 can be
// any of them and its tier 1 any later one: a lower tier must hold at least as many tokens).
std::vector<KvTier> decode_tier_catalogue() {
  auto i = [](int bits) { return int_format(per_token(bits)); };
  auto ch = [](int bits, int G) { return int_format(per_channel(bits, G)); };
  auto tg = [](int bits) { return int_format(per_token_group(bits, 8)); };
  // Ordered so that a later tier holds at least as many tokens per page, mostly (page_bytes_for
  // pads until it does): the kernel reads any pair.
  return {KvTier{fp32_format(), fp32_format()}, KvTier{fp16_format(), fp16_format()},
          KvTier{fp8_e4m3_format(), fp8_e4m3_format()}, KvTier{i(8), i(8)}, KvTier{i(8), i(4)},
          KvTier{ch(4, 16), tg(4)}, KvTier{i(4), i(2)}, KvTier{ch(2, 16), i(2)}, KvTier{i(2), tg(2)},
          KvTier{i(2), i(2)}};
}

DecodeHeadInput DecodeCase::input() const {
  DecodeHeadInput in;
  in.head_dim = head_dim;
  in.group = group;
  in.scale = scale;
  in.tiers = tier_reads;
  in.pages = page_reads;
  in.residual_tokens = residual_tokens;
  in.residual_keys = residual_keys;
  in.residual_values = residual_values;
  in.q = q;
  return in;
}

DecodeCase draw_decode_case(std::int64_t max_head_dim, std::int64_t max_group,
                            std::span<const std::int64_t> head_dims) {
  std::vector<std::int64_t> dims, groups;
  for (std::int64_t d : {8, 16, 32, 64, 128, 256}) {
    if (d <= max_head_dim) dims.push_back(d);
  }
  if (!head_dims.empty()) dims.assign(head_dims.begin(), head_dims.end());
  for (std::int64_t g : {1, 2, 4, 8, 16}) {
    if (g <= max_group) groups.push_back(g);
  }
  const std::int64_t d = *rc::gen::elementOf(dims);
  std::vector<KvTier> catalogue;
  for (const KvTier& t : decode_tier_catalogue()) {
    try {
      format_bytes(t.key, d);
      format_bytes(t.value, d);
      catalogue.push_back(t);
    } catch (const InputError&) {
      // not a format of this head size
    }
  }
  const std::int64_t group = *rc::gen::elementOf(groups);
  const int high = *rc::gen::inRange(0, static_cast<int>(catalogue.size()));
  bool two_tiers = *rc::gen::arbitrary<bool>();
  const int low = two_tiers ? *rc::gen::inRange(high, static_cast<int>(catalogue.size())) : high;
  const std::int64_t target = *rc::gen::element<std::int64_t>(1, 3, 7, 16);
  const std::int64_t slack = *rc::gen::inRange<std::int64_t>(0, 32);
  const int pages = *rc::gen::inRange(0, 5);
  int high_pages = two_tiers ? *rc::gen::inRange(0, pages + 1) : pages;
  const int free_pages = *rc::gen::inRange(0, 3);
  const int kill_percent = *rc::gen::element(0, 30, 70, 100);
  std::int64_t residual = *rc::gen::inRange<std::int64_t>(0, 4);
  const auto seed = *rc::gen::arbitrary<std::uint64_t>();

  std::vector<KvTier> tiers{catalogue[static_cast<std::size_t>(high)]};
  if (two_tiers) tiers.push_back(catalogue[static_cast<std::size_t>(low)]);
  PagePoolConfig config;
  config.pages = pages + free_pages;
  if (config.pages == 0) config.pages = 1;
  config.page_bytes = page_bytes_for(tiers, d, target) + slack;
  // A pool's lower tier must hold at least as many tokens as the one above. Some catalogue pairs
  // never do at some head sizes (the later tier takes more bytes per token there), and the slack
  // can tip a pair over: such a case keeps one tier.
  if (two_tiers && tokens_or_zero(tiers[1], d, config.page_bytes) < tokens_or_zero(tiers[0], d, config.page_bytes)) {
    tiers.pop_back();
    two_tiers = false;
    high_pages = pages;
  }
  config.head_dim = d;
  config.tiers = tiers;
  config.poison = true;
  DecodeCase c(config);
  c.head_dim = d;
  c.group = group;
  c.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  std::mt19937_64 rng(seed);

  // Pages sit anywhere in the pool, free (poisoned) pages between them.
  std::vector<PageId> ids(static_cast<std::size_t>(config.pages));
  std::iota(ids.begin(), ids.end(), PageId{0});
  std::shuffle(ids.begin(), ids.end(), rng);
  for (int p = 0; p < c.pool.tiers(); ++p) c.tier_reads.push_back(make_tier_read(tiers[static_cast<std::size_t>(p)], d, config.page_bytes));

  std::int64_t walk_slot = 0;
  std::uniform_int_distribution<int> percent(0, 99);
  for (int p = 0; p < pages; ++p) {
    const PageId id = ids[static_cast<std::size_t>(p)];
    const int tier = p < high_pages ? 0 : 1;  // walk order: high-precision pages, then low
    c.pool.format(id, PageOwner{HeadKey{0, 0, 0}, tier});
    c.walk.push_back(id);
    const std::int64_t n = c.pool.tokens_per_page(tier);
    const std::vector<float> keys = draw_keys(n, d, rng());
    const std::vector<float> values = make_values(ValueDist::kNormal, n, d, rng());
    const KvTier& t = tiers[static_cast<std::size_t>(tier)];
    const EncodedPage k = encode_page(t.key, keys, n, d);
    const EncodedPage v = encode_page(t.value, values, n, d);
    for (std::int64_t u = 0; u * k.block.group_tokens < n && k.block.group_meta_bytes > 0; ++u) {
      c.pool.store_key_group_meta(id, u * k.block.group_tokens, k.block.group(u));
    }
    for (std::int64_t s = 0; s < n; ++s) {
      const bool dead = percent(rng) < kill_percent;
      if (dead && percent(rng) < 50) continue;  // never written: poisoned by format()
      c.pool.put(id, s, TokenPayload{static_cast<std::int32_t>(walk_slot + s), 0.0f});
      c.pool.store_codes(id, s, PagePool::SlotCodes{to_vector(k.block.row(s)), to_vector(k.block.meta(s)),
                                                    to_vector(v.block.row(s)), to_vector(v.block.meta(s))});
      if (dead) {
        c.pool.kill(id, s);  // written, then evicted: poisoned by kill()
        continue;
      }
      const auto row = [&](const std::vector<float>& x) { return x.begin() + s * d; };
      c.keys_hat.insert(c.keys_hat.end(), row(k.x_hat), row(k.x_hat) + d);
      c.values_hat.insert(c.values_hat.end(), row(v.x_hat), row(v.x_hat) + d);
      c.key_zero.push_back(k.zero[static_cast<std::size_t>(s)]);
      c.live_walk_index.push_back(walk_slot + s);
    }
    c.page_reads.push_back(PageRead{c.pool.bytes(id).data(), c.pool.live_mask(id), tier});
    walk_slot += n;
  }
  if (c.live() == 0 && residual == 0) residual = 1;  // the kernel needs one token to attend to
  c.residual_tokens = residual;
  const std::vector<float> rk = draw_keys(residual, d, rng());
  const std::vector<float> rv = make_values(ValueDist::kNormal, residual, d, rng());
  const EncodedPage rk16 = encode_page(fp16_format(), rk, residual, d);
  const EncodedPage rv16 = encode_page(fp16_format(), rv, residual, d);
  for (std::int64_t r = 0; r < residual; ++r) {
    for (std::int64_t ch = 0; ch < d; ++ch) {
      c.residual_keys.push_back(quant::f16_from_float(rk16.x_hat[static_cast<std::size_t>(r * d + ch)]));
      c.residual_values.push_back(quant::f16_from_float(rv16.x_hat[static_cast<std::size_t>(r * d + ch)]));
    }
    c.keys_hat.insert(c.keys_hat.end(), rk16.x_hat.begin() + r * d, rk16.x_hat.begin() + (r + 1) * d);
    c.values_hat.insert(c.values_hat.end(), rv16.x_hat.begin() + r * d, rv16.x_hat.begin() + (r + 1) * d);
    c.key_zero.push_back(0.0f);
    c.live_walk_index.push_back(walk_slot + r);
  }
  c.slots = walk_slot + residual;
  c.q = make_values(ValueDist::kNormal, group, d, rng());

  std::ostringstream s;
  s << "head_dim " << d << ", group " << group << ", tiers [" << kv_tier_name(tiers[0]);
  if (two_tiers) s << " | " << kv_tier_name(tiers[1]);
  s << "], page_bytes " << config.page_bytes << " (" << c.pool.tokens_per_page(0) << " tokens/page";
  if (two_tiers) s << ", low " << c.pool.tokens_per_page(1);
  s << "), pages " << pages << " (" << high_pages << " high), live " << c.live() - residual << " of " << walk_slot
    << " slots, residual " << residual;
  c.summary = s.str();
  RC_LOG() << c.summary << "\n";
  RC_CLASSIFY(c.pool.tokens_per_page(0) == target, "exact target tokens/page");
  return c;
}

// Float tolerance of the kernel against the double oracle, per query head g.
//
// Logits: the kernel sums head_dim products in float (fused for INT keys: ŝ Σ q_c code_c +
// ẑ Σ q_c, oracles/quant_bounds.h fused_dot_tolerance), so each logit is within
//   δ_dot = 2 (d + 4) u · scale · Σ_c |q_c| (|k̂_c| + 2|ẑ|)     (ŝ code_c ≤ |k̂_c| + |ẑ|)
// of the exact one; max-subtraction and exp add about 2 u |l| + 2 u more, together δ.
// Probabilities then satisfy p̂/p ∈ e^{±2δ} (docs/design.md §7), times the
// float sum and division of n weights: (2n + 8) u. The output moves by at most
// ‖p̂ - p‖₁ max|v̂| plus the float accumulation of n weighted values, n u max|v̂|.
// Twice that, for the slack of the inequalities: a planted bug moves the output by O(|v|).

DecodeTolerance decode_tolerance(const DecodeCase& c, std::int64_t g) {
  const std::int64_t d = c.head_dim;
  const auto n = static_cast<double>(c.live());
  const float* q = c.q.data() + g * d;
  double delta = 0.0, max_v = 0.0;
  for (std::int64_t j = 0; j < c.live(); ++j) {
    double magnitude = 0.0, logit = 0.0;
    for (std::int64_t ch = 0; ch < d; ++ch) {
      const double k = c.keys_hat[static_cast<std::size_t>(j * d + ch)];
      magnitude += std::fabs(q[ch]) * (std::fabs(k) + 2.0 * c.key_zero[static_cast<std::size_t>(j)]);
      logit += q[ch] * k;
      max_v = std::max(max_v, static_cast<double>(std::fabs(c.values_hat[static_cast<std::size_t>(j * d + ch)])));
    }
    const double dot_error = 2.0 * static_cast<double>(d + 4) * kFloatEps * c.scale * magnitude;
    delta = std::max(delta, dot_error + 2.0 * kFloatEps * std::fabs(c.scale * logit) * 2.0 + 2.0 * kFloatEps);
  }
  DecodeTolerance t;
  t.prob_rel = 2.0 * (std::expm1(2.0 * delta) + (2.0 * n + 8.0) * kFloatEps);
  t.out = 2.0 * max_v * (std::expm1(2.0 * delta) + (3.0 * n + 8.0) * kFloatEps);
  return t;
}

RetainedAttentionRef decode_oracle(const DecodeCase& c) {
  return retained_attention_ref(c.q, c.keys_hat, c.values_hat, c.group, c.head_dim, c.scale);
}

}  // namespace kvcheck::testing
