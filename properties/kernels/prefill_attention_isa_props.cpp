// Prefill attention, bit for bit: the vectorized tile loops (kernels/cpu/prefill_attention.h) in
// their portable, AVX2 and AVX-512 builds against each other and against a straightforward scalar
// restatement of the kernel's arithmetic kept here (prefill_attention_scalar). The quick-report
// baseline and the committed sweep go through this kernel at every prompt, so no ISA, tiling of
// the work into lanes, or thread count may change a rounding (docs/design.md §9).
//
// The restatement walks one query row at a time, key tiles j0 = 0, tile, ... up to the row:
//   s_ij  = scale * row_ops::dot(q_i, k_j)        (8 lane sums, combined pairwise, plus the tail)
//   m'    = max(m, s_ij over the tile's visible keys); c = exp(m - m'); if c != 1: out_i *= c, l *= c
//   p_ij  = exp(s_ij - m'), l += p_ij and out_i += p_ij * v_j key by key
//   out_i *= 1 / l, lse_i = m + log l
//   column_j = Σ_i exp(s_ij - lse_i) over queries i = j, j + 1, ... in order (window: i >= T - W).
// with exp = exp_lanes::exp_weight (kernels/cpu/exp_lanes.h), whose bits every lane reproduces.
//   RC_PARAMS="seed=7 max_success=2000" build/properties/kvcheck_property_tests --gtest_filter='PrefillAttentionIsa*'
#include <cstdlib>
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/dense_ops.h"
#include "kernels/cpu/exp_lanes.h"
#include "kernels/cpu/prefill_attention.h"
#include "kernels/cpu/row_ops.h"
#include "properties/support/prefill_cases.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::PrefillCase;

constexpr int kCases = 300;

struct KernelRun {
  std::vector<float> out, columns, window;
};

KernelRun run_kernel(const PrefillAttentionInput& in, LinearIsa isa) {
  KernelRun r;
  r.out.assign(static_cast<std::size_t>(in.tokens * in.n_heads * in.head_dim), -1.0f);
  r.columns.assign(static_cast<std::size_t>(in.n_heads * in.tokens), -1.0f);
  r.window.assign(r.columns.size(), -1.0f);
  prefill_attention(in, PrefillAttentionOutput{r.out, r.columns, r.window}, isa);
  return r;
}

KernelRun prefill_attention_scalar(const PrefillAttentionInput& in) {
  const std::int64_t T = in.tokens, d = in.head_dim, width = in.n_heads * d, kv_width = in.n_kv_heads * d;
  const std::int64_t tile = std::min(in.tile, T), first_window_query = T - std::min(in.window, T);
  KernelRun r;
  r.out.assign(static_cast<std::size_t>(T * width), 0.0f);
  r.columns.assign(static_cast<std::size_t>(in.n_heads * T), 0.0f);
  r.window.assign(r.columns.size(), 0.0f);
  std::vector<float> lse(static_cast<std::size_t>(T));
  for (std::int64_t h = 0; h < in.n_heads; ++h) {
    const std::int64_t kv = h / (in.n_heads / in.n_kv_heads);
    const auto score = [&](std::int64_t i, std::int64_t j) {
      return in.scale * row_ops::dot(in.q.data() + i * width + h * d, in.k.data() + j * kv_width + kv * d, d);
    };
    for (std::int64_t i = 0; i < T; ++i) {
      float* acc = r.out.data() + i * width + h * d;
      float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
      for (std::int64_t j0 = 0; j0 <= i; j0 += tile) {
        const std::int64_t j_end = std::min(j0 + tile, i + 1);
        float m_new = m;
        for (std::int64_t j = j0; j < j_end; ++j) m_new = std::max(m_new, score(i, j));
        const float correction = exp_lanes::exp_weight(m - m_new);
        if (correction != 1.0f) {
          for (std::int64_t e = 0; e < d; ++e) acc[e] *= correction;
          l *= correction;
        }
        for (std::int64_t j = j0; j < j_end; ++j) {
          const float p = exp_lanes::exp_weight(score(i, j) - m_new);
          l += p;
          const float* v = in.v.data() + j * kv_width + kv * d;
          for (std::int64_t e = 0; e < d; ++e) acc[e] += p * v[e];
        }
        m = m_new;
      }
      const float inv = 1.0f / l;
      for (std::int64_t e = 0; e < d; ++e) acc[e] *= inv;
      lse[static_cast<std::size_t>(i)] = m + std::log(l);
    }
    for (std::int64_t i = 0; i < T; ++i) {
      for (std::int64_t j = 0; j <= i; ++j) {
        const float p = exp_lanes::exp_weight(score(i, j) - lse[static_cast<std::size_t>(i)]);
        r.columns[static_cast<std::size_t>(h * T + j)] += p;
        if (i >= first_window_query) r.window[static_cast<std::size_t>(h * T + j)] += p;
      }
    }
  }
  return r;
}

void assert_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what,
                      const PrefillCase& c) {
  RC_ASSERT(got.size() == want.size());
  for (std::size_t at = 0; at < got.size(); ++at) {
    if (std::memcmp(&got[at], &want[at], sizeof(float)) != 0) {
      std::ostringstream m;
      m << what << "[" << at << "]: " << std::hexfloat << got[at] << " vs " << want[at] << " (" << c.summary << ")";
      RC_FAIL(m.str());
    }
  }
}

void assert_same_bits(const KernelRun& got, const KernelRun& want, const PrefillCase& c) {
  assert_same_bits(got.out, want.out, "out", c);
  assert_same_bits(got.columns, want.columns, "column_sums", c);
  assert_same_bits(got.window, want.window, "window_sums", c);
}

// Whole-lane head sizes (both 32-float blocks and 8-float remainders of the value loop) and
// sizes that are not whole lanes (the scalar loops).
PrefillCase draw_case() { return testing::draw_prefill_case({4, 8, 12, 24, 40, 64, 72, 128}); }

TEST(PrefillAttentionIsaProps, PortableBuildIsTheScalarArithmeticBitForBit) {
  check_property("prefill attention/portable == scalar restatement", kCases, [] {
    const PrefillCase c = draw_case();
    assert_same_bits(run_kernel(c.in, LinearIsa::kPortable), prefill_attention_scalar(c.in), c);
  });
}

TEST(PrefillAttentionIsaProps, Avx2BuildIsBitIdenticalToPortable) {
  if (!linear_isa_available(LinearIsa::kAvx2)) GTEST_SKIP() << "this CPU has no AVX2 + F16C";
  check_property("prefill attention/avx2 == portable == scalar restatement", kCases, [] {
    const PrefillCase c = draw_case();
    const KernelRun avx2 = run_kernel(c.in, LinearIsa::kAvx2);
    assert_same_bits(avx2, run_kernel(c.in, LinearIsa::kPortable), c);
    assert_same_bits(avx2, prefill_attention_scalar(c.in), c);
  });
}

// The sixteen-lane build: two query rows to a register in the scores, sixteen lanes in the
// weights, the output elements and the sums.
TEST(PrefillAttentionIsaProps, Avx512BuildIsBitIdenticalToPortable) {
  if (!linear_isa_available(LinearIsa::kAvx512)) GTEST_SKIP() << "this CPU has no AVX-512 (F, VL, BW, DQ)";
  check_property("prefill attention/avx512 == portable == scalar restatement", kCases, [] {
    const PrefillCase c = draw_case();
    const KernelRun avx512 = run_kernel(c.in, LinearIsa::kAvx512);
    assert_same_bits(avx512, run_kernel(c.in, LinearIsa::kPortable), c);
    assert_same_bits(avx512, prefill_attention_scalar(c.in), c);
  });
}

// Prefix reuse (optimized/model_runner.h) computes only a prompt's uncached rows: rows
// first_query .. T-1 over all T keys must be those rows of the whole prompt's run, bit for bit,
// in every ISA (a query tile starting at first_query instead of a multiple of the tile, or key
// tiles counted from the first query instead of key 0, would change the rescale points).
TEST(PrefillAttentionIsaProps, RowsFromFirstQueryAreTheWholePromptsRows) {
  check_property("prefill attention/rows from first_query == whole prompt's rows", kCases, [] {
    PrefillCase c = draw_case();
    RC_PRE(c.in.tokens >= 2);
    c.in.window = 0;
    const std::int64_t first = *rc::gen::inRange<std::int64_t>(1, c.in.tokens);
    const std::int64_t width = c.in.n_heads * c.in.head_dim;
    for (const LinearIsa isa : {LinearIsa::kPortable, LinearIsa::kAvx2, LinearIsa::kAvx512}) {
      if (!linear_isa_available(isa)) continue;
      std::vector<float> whole(static_cast<std::size_t>(c.in.tokens * width), -1.0f);
      prefill_attention(c.in, PrefillAttentionOutput{whole}, isa);
      PrefillAttentionInput tail = c.in;
      tail.first_query = first;
      tail.q = std::span<const float>(c.q).subspan(static_cast<std::size_t>(first * width));
      std::vector<float> rows(static_cast<std::size_t>((c.in.tokens - first) * width), -1.0f);
      prefill_attention(tail, PrefillAttentionOutput{rows}, isa);
      assert_same_bits(rows, std::vector<float>(whole.begin() + first * width, whole.end()), "out", c);
    }
  });
}

// ModelRunner::capture_prefill sums a second observation window from that window's rows alone:
// window sums from first_query = T - W (or any earlier row) must be the whole prompt's, bit for bit.
TEST(PrefillAttentionIsaProps, WindowSumsFromTheWindowsRowsAreTheWholePromptsSums) {
  check_property("prefill attention/window sums from the window's rows == whole prompt's", kCases, [] {
    PrefillCase c = draw_case();
    RC_PRE(c.in.window > 0);
    const std::int64_t W = std::min(c.in.window, c.in.tokens);
    const std::int64_t first = *rc::gen::inRange<std::int64_t>(0, c.in.tokens - W + 1);
    const std::int64_t width = c.in.n_heads * c.in.head_dim;
    for (const LinearIsa isa : {LinearIsa::kPortable, LinearIsa::kAvx2, LinearIsa::kAvx512}) {
      if (!linear_isa_available(isa)) continue;
      const KernelRun whole = run_kernel(c.in, isa);
      PrefillAttentionInput tail = c.in;
      tail.first_query = first;
      tail.q = std::span<const float>(c.q).subspan(static_cast<std::size_t>(first * width));
      std::vector<float> rows(static_cast<std::size_t>((c.in.tokens - first) * width), -1.0f);
      std::vector<float> window(whole.window.size(), -1.0f);
      prefill_attention(tail, PrefillAttentionOutput{rows, {}, window}, isa);
      assert_same_bits(window, whole.window, "window_sums", c);
      assert_same_bits(rows, std::vector<float>(whole.out.begin() + first * width, whole.out.end()), "out", c);
    }
  });
}

TEST(PrefillAttentionIsa, DefaultIsTheFastestAvailable) {
  const LinearIsa widest = linear_isa_available(LinearIsa::kAvx512) ? LinearIsa::kAvx512
                           : linear_isa_available(LinearIsa::kAvx2)  ? LinearIsa::kAvx2
                                                                     : LinearIsa::kPortable;
  if (std::getenv("KVCHECK_ISA") != nullptr) GTEST_SKIP() << "KVCHECK_ISA caps the choice in this run";
  EXPECT_EQ(prefill_attention_isa(), widest);
}

}  // namespace
}  // namespace kvcheck
