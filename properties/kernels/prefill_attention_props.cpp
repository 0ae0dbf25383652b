// Tiled causal prefill attention against the double oracle: for random lengths (1..300), GQA
// head layouts, head sizes, tiles {1, 3, 16, 64} and observation windows {0, 1, 7, 32, > tokens},
// the output rows equal reference/attention.h attention_ref and the column / window sums equal
// oracles/retained_attention.h prefill_column_sums_ref, within the float tolerance derived in
// properties/support/prefill_cases.cpp;
// the result does not depend on the thread count, bit for bit.
//   RC_PARAMS="seed=7 max_success=5000" build-attn/properties/kvcheck_property_tests --gtest_filter='PrefillAttentionProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cpu/prefill_attention.h"
#include "oracles/retained_attention.h"
#include "properties/support/property_check.h"
#include "properties/support/prefill_cases.h"

namespace kvcheck {
namespace {

using testing::check_property;

constexpr int kGateCases = 300;
using testing::kFloatEps;
using testing::kProbUnderflow;
using testing::PrefillCase;

PrefillCase draw_case() { return testing::draw_prefill_case(); }
double head_tolerance(const PrefillCase& c, std::int64_t h) { return testing::prefill_head_tolerance(c, h); }

struct KernelRun {
  std::vector<float> out, columns, window;
  std::int64_t scratch = -1;
};

KernelRun run_kernel(const PrefillAttentionInput& in) {
  KernelRun r;
  r.out.assign(static_cast<std::size_t>(in.tokens * in.n_heads * in.head_dim), -1.0f);
  r.columns.assign(static_cast<std::size_t>(in.n_heads * in.tokens), -1.0f);
  r.window.assign(r.columns.size(), -1.0f);
  prefill_attention(in, PrefillAttentionOutput{r.out, r.columns, r.window, &r.scratch});
  return r;
}

TEST(PrefillAttentionProps, MatchesExactAttentionAndColumnSums) {
  check_property("prefill attention/out, column and window sums vs attention_ref", kGateCases, [] {
    const PrefillCase c = draw_case();
    const PrefillAttentionInput& in = c.in;
    const KernelRun k = run_kernel(in);
    RC_ASSERT(k.scratch == prefill_attention_scratch_bytes(in, true));
    const PrefillColumnSumsRef ref =
        prefill_column_sums_ref(c.q, c.k, c.v, in.tokens, in.n_heads, in.n_kv_heads, in.head_dim, in.window);
    const std::int64_t d = in.head_dim, width = in.n_heads * d;
    for (std::int64_t h = 0; h < in.n_heads; ++h) {
      const double rel = head_tolerance(c, h);
      double max_v = 0.0;
      for (float x : c.v) max_v = std::max(max_v, static_cast<double>(std::fabs(x)));
      for (std::int64_t i = 0; i < in.tokens; ++i) {
        for (std::int64_t ch = 0; ch < d; ++ch) {
          const float got = k.out[static_cast<std::size_t>(i * width + h * d + ch)];
          const double want = ref.out(i, h * d + ch);
          if (!(std::fabs(got - want) <= rel * max_v)) {
            RC_FAIL("out: head " + std::to_string(h) + ", query " + std::to_string(i) + ", channel " +
                    std::to_string(ch) + ": kernel " + std::to_string(got) + ", oracle " + std::to_string(want) +
                    " (" + c.summary + ")");
          }
        }
      }
      for (std::int64_t j = 0; j < in.tokens; ++j) {
        const auto at = static_cast<std::size_t>(h * in.tokens + j);
        const double slack = static_cast<double>(in.tokens) * kProbUnderflow;
        if (!(std::fabs(k.columns[at] - ref.column_sums[at]) <= rel * ref.column_sums[at] + slack)) {
          RC_FAIL("column sum: head " + std::to_string(h) + ", key " + std::to_string(j) + ": kernel " +
                  std::to_string(k.columns[at]) + ", oracle " + std::to_string(ref.column_sums[at]) + " (" +
                  c.summary + ")");
        }
        if (!(std::fabs(k.window[at] - ref.window_sums[at]) <= rel * ref.window_sums[at] + slack)) {
          RC_FAIL("window sum: head " + std::to_string(h) + ", key " + std::to_string(j) + ": kernel " +
                  std::to_string(k.window[at]) + ", oracle " + std::to_string(ref.window_sums[at]) + " (" +
                  c.summary + ")");
        }
      }
    }
  });
}

// Heads are independent: splitting them over threads changes nothing, bit for bit; and leaving
// the sums out changes no output (pass one alone is the same arithmetic).
TEST(PrefillAttentionProps, ThreadsAndSumsDoNotChangeTheResult) {
  check_property("prefill attention/threads and sums change nothing", kGateCases / 2, [] {
    PrefillCase c = draw_case();
    const KernelRun threaded = run_kernel(c.in);
    PrefillAttentionInput one = c.in;
    one.threads = 1;
    const KernelRun single = run_kernel(one);
    RC_ASSERT(std::memcmp(threaded.out.data(), single.out.data(), single.out.size() * sizeof(float)) == 0);
    RC_ASSERT(std::memcmp(threaded.columns.data(), single.columns.data(), single.columns.size() * sizeof(float)) == 0);
    RC_ASSERT(std::memcmp(threaded.window.data(), single.window.data(), single.window.size() * sizeof(float)) == 0);
    std::vector<float> out_only(single.out.size(), -1.0f);
    std::int64_t scratch = -1;
    prefill_attention(c.in, PrefillAttentionOutput{out_only, {}, {}, &scratch});
    RC_ASSERT(std::memcmp(out_only.data(), single.out.data(), out_only.size() * sizeof(float)) == 0);
    RC_ASSERT(scratch == prefill_attention_scratch_bytes(c.in, false));
  });
}

}  // namespace
}  // namespace kvcheck
