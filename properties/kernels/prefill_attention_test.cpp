// Tiled prefill attention: a case small enough to work out by hand, GQA head mapping, linear
// scratch memory (computed and measured), and the errors it reports.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "kernels/cpu/prefill_attention.h"
#include "properties/support/test_support.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;

constexpr float kTol = 1e-6f;

// Two tokens, one head, head_dim 2, scale 1. Query 0 sees only key 0: out_0 = v_0. Query 1 has
// q·k = 0 and ln 3: p = (1/4, 3/4), out_1 = v_0/4 + 3 v_1/4 = (1, 3).
// Column sums: (1 + 1/4, 3/4); the window of the last query: (1/4, 3/4).
TEST(PrefillAttention, TwoTokensByHand) {
  const float ln3 = std::log(3.0f);
  const std::vector<float> q{5, -7, 1, 0};
  const std::vector<float> k{0, 0, ln3, 0};
  const std::vector<float> v{4, 0, 0, 4};
  for (const std::int64_t tile : {1, 2, 64}) {
    PrefillAttentionInput in;
    in.tokens = 2;
    in.n_heads = in.n_kv_heads = 1;
    in.head_dim = 2;
    in.scale = 1.0f;
    in.q = q;
    in.k = k;
    in.v = v;
    in.tile = tile;
    in.window = 1;
    std::vector<float> out(4), columns(2), window(2);
    prefill_attention(in, {out, columns, window});
    const std::vector<float> want_out{4, 0, 1, 3};
    for (int c = 0; c < 4; ++c) EXPECT_NEAR(out[c], want_out[c], kTol) << "tile " << tile << ", element " << c;
    EXPECT_NEAR(columns[0], 1.25f, kTol) << "tile " << tile;
    EXPECT_NEAR(columns[1], 0.75f, kTol) << "tile " << tile;
    EXPECT_NEAR(window[0], 0.25f, kTol) << "tile " << tile;
    EXPECT_NEAR(window[1], 0.75f, kTol) << "tile " << tile;
  }
}

// Four query heads over two kv heads: heads 0 and 1 read kv head 0 (values all 1), heads 2 and 3
// read kv head 1 (values all 2), whatever the probabilities are. A mapping h % n_kv_heads would
// send head 1 to kv head 1.
TEST(PrefillAttention, GqaQueryHeadReadsItsKvHead) {
  const std::int64_t tokens = 5, d = 3;
  PrefillAttentionInput in;
  in.tokens = tokens;
  in.n_heads = 4;
  in.n_kv_heads = 2;
  in.head_dim = d;
  in.scale = 0.5f;
  in.tile = 2;
  std::vector<float> q(static_cast<std::size_t>(tokens * 4 * d)), k(static_cast<std::size_t>(tokens * 2 * d)), v(k.size());
  for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>(i % 7) - 3.0f;
  for (std::size_t i = 0; i < k.size(); ++i) k[i] = static_cast<float>(i % 5) - 2.0f;
  for (std::int64_t j = 0; j < tokens; ++j) {
    for (std::int64_t c = 0; c < d; ++c) {
      v[static_cast<std::size_t>(j * 2 * d + c)] = 1.0f;
      v[static_cast<std::size_t>(j * 2 * d + d + c)] = 2.0f;
    }
  }
  in.q = q;
  in.k = k;
  in.v = v;
  std::vector<float> out(q.size());
  prefill_attention(in, {out, {}, {}});
  for (std::int64_t i = 0; i < tokens; ++i) {
    for (std::int64_t h = 0; h < 4; ++h) {
      for (std::int64_t c = 0; c < d; ++c) {
        EXPECT_NEAR(out[static_cast<std::size_t>((i * 4 + h) * d + c)], h < 2 ? 1.0f : 2.0f, kTol)
            << "query " << i << ", head " << h;
      }
    }
  }
}

PrefillAttentionInput shape(std::int64_t tokens, std::int64_t heads, int threads) {
  PrefillAttentionInput in;
  in.tokens = tokens;
  in.n_heads = heads;
  in.n_kv_heads = 1;
  in.head_dim = 4;
  in.scale = 0.5f;
  in.tile = 64;
  in.threads = threads;
  return in;
}

// Scratch is O(tile² + tile · tokens) per worker, never O(tokens²): doubling the length at most
// doubles it, and without sums it does not grow at all.
TEST(PrefillAttention, ScratchIsLinearInTokens) {
  for (std::int64_t L = 1024; L <= 8192; L *= 2) {
    const std::int64_t at_l = prefill_attention_scratch_bytes(shape(L, 8, 4), true);
    const std::int64_t at_2l = prefill_attention_scratch_bytes(shape(2 * L, 8, 4), true);
    EXPECT_LE(static_cast<double>(at_2l) / static_cast<double>(at_l), 2.1) << "L " << L;
    // Per worker and token: one strip column of tile (64) floats plus the tile's share, far below
    // one row of L floats.
    EXPECT_LE(at_l / 4 / L, 4 * (64 + 8)) << "L " << L;
    EXPECT_EQ(prefill_attention_scratch_bytes(shape(L, 8, 4), false),
              prefill_attention_scratch_bytes(shape(2 * L, 8, 4), false));
  }
}

// The same, measured: the kernel reports the bytes it really allocated, which equal the formula,
// at lengths where a tokens² buffer would be 16 MiB and more.
TEST(PrefillAttention, MeasuredScratchMatchesAndIsLinear) {
  std::int64_t previous = 0;
  for (std::int64_t L = 256; L <= 2048; L *= 2) {
    for (const int threads : {1, 3}) {
      PrefillAttentionInput in = shape(L, 2, threads);
      std::vector<float> q(static_cast<std::size_t>(L * 2 * 4)), kv(static_cast<std::size_t>(L * 4));
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = static_cast<float>((i * 37) % 11) * 0.1f;
      for (std::size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<float>((i * 13) % 7) * 0.1f;
      in.q = q;
      in.k = kv;
      in.v = kv;
      std::vector<float> out(q.size()), columns(static_cast<std::size_t>(2 * L));
      std::int64_t used = -1;
      prefill_attention(in, {out, columns, {}, &used});
      EXPECT_EQ(used, prefill_attention_scratch_bytes(in, true)) << "L " << L << ", threads " << threads;
      // Below one tokens² float matrix (4 L² bytes): the strips are tile x L floats per worker.
      EXPECT_LT(used, 4 * L * L) << "L " << L;
      if (threads == 1) {
        if (previous > 0) {
          EXPECT_LE(static_cast<double>(used) / static_cast<double>(previous), 2.1) << "L " << L;
        }
        previous = used;
      }
      // Every query's probabilities sum to 1, so the column sums add up to the number of queries.
      double total = 0.0;
      for (float x : columns) total += x;
      EXPECT_NEAR(total, 2.0 * static_cast<double>(L), 1e-3 * static_cast<double>(L)) << "L " << L;
    }
  }
}

TEST(PrefillAttention, BadShapesNameTheField) {
  const std::vector<float> q(2 * 4), kv(2 * 4), short_kv(7);
  std::vector<float> out(8), sums(2), bad_sums(3);
  auto base = [&] {
    PrefillAttentionInput in;
    in.tokens = 2;
    in.n_heads = in.n_kv_heads = 1;
    in.head_dim = 4;
    in.scale = 0.5f;
    in.q = q;
    in.k = kv;
    in.v = kv;
    return in;
  };
  auto expect = [&](PrefillAttentionInput in, PrefillAttentionOutput o, const char* field) {
    expect_input_error([&] { prefill_attention(in, o); }, {"prefill attention", field});
  };
  PrefillAttentionInput in = base();
  in.k = short_kv;
  expect(in, {out}, "k:");
  in = base();
  in.v = short_kv;
  expect(in, {out}, "v:");
  in = base();
  in.q = short_kv;
  expect(in, {out}, "q:");
  expect(base(), {std::span<float>(out).first(7)}, "out:");
  expect(base(), {out, bad_sums}, "column_sums:");
  expect(base(), {out, sums, bad_sums}, "window_sums:");
  in = base();
  in.first_query = 2;  // not below tokens
  expect(in, {out}, "first_query:");
  in = base();
  in.first_query = 1;
  in.q = std::span<const float>(q).subspan(4);
  expect(in, {std::span<float>(out).first(4), std::span<float>(sums).first(2)}, "first_query:");  // sums need every query
  in.window = 2;  // window sums need the window's queries: both, and only query 1 is computed
  expect(in, {std::span<float>(out).first(4), {}, std::span<float>(sums).first(2)}, "first_query:");
  expect(in, {out}, "out:");
  in = base();
  in.n_heads = 3;
  in.n_kv_heads = 2;
  expect(in, {out}, "n_heads / n_kv_heads:");
  // No kv heads (or no query heads) is a bad shape too, not a division by zero.
  for (const auto& [heads, kv_heads] : {std::pair{1, 0}, std::pair{0, 1}, std::pair{2, -1}}) {
    in = base();
    in.n_heads = heads;
    in.n_kv_heads = kv_heads;
    expect(in, {out}, "n_heads / n_kv_heads:");
  }
  in = base();
  in.head_dim = 0;
  expect(in, {out}, "head_dim:");
  in = base();
  in.tile = 0;
  expect(in, {out}, "tile:");
  in = base();
  in.window = -1;
  expect(in, {out}, "window:");
  in = base();
  in.threads = 0;
  expect(in, {out}, "threads:");
  in = base();
  in.tokens = 0;
  expect(in, {out}, "tokens:");
  in = base();
  in.scale = std::nanf("");
  expect(in, {out}, "scale:");
}

}  // namespace
}  // namespace kvcheck
