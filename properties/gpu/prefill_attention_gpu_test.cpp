// The CUDA prefill attention (with column and window sums) against the double oracle and its CPU
// twin on the same random cases (properties/support/prefill_cases.h). Skips visibly without CUDA
// or without a device.
//   RC_PARAMS="seed=7 max_success=2000" build/properties/kvcheck_gpu_tests --gtest_filter='PrefillAttentionGpu.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/prefill_attention_cuda_adapter.h"
#include "oracles/retained_attention.h"
#include "properties/support/decode_cases.h"
#include "properties/support/gpu_skip.h"
#include "properties/support/prefill_cases.h"
#include "properties/support/property_check.h"

namespace kvcheck {
namespace {

using testing::check_property;
using testing::PrefillCase;

constexpr int kCases = 200;
constexpr std::int64_t kGpuKeyChunk = 32;  // the kernel's online-softmax chunk

struct PrefillRun {
  std::vector<float> out, columns, window;
};

PrefillRun run(const PrefillAttentionInput& in, bool gpu, bool sums = true) {
  PrefillRun r;
  r.out.assign(static_cast<std::size_t>(in.tokens * in.n_heads * in.head_dim), -1.0f);
  if (sums) {
    r.columns.assign(static_cast<std::size_t>(in.n_heads * in.tokens), -1.0f);
    r.window.assign(r.columns.size(), -1.0f);
  }
  const PrefillAttentionOutput out{r.out, r.columns, r.window};
  if (gpu) prefill_attention_cuda(in, out);
  else prefill_attention(in, out);
  return r;
}

TEST(PrefillAttentionGpu, MatchesOracleAndCpuTwin) {
  KVCHECK_REQUIRE_GPU();
  check_property("prefill attention/GPU vs oracle and CPU twin", kCases, [] {
    PrefillCase c = testing::draw_prefill_case();
    const PrefillAttentionInput& in = c.in;
    const PrefillRun gpu = run(in, true);
    const PrefillRun cpu = run(in, false);
    // The GPU rescales once per 32-key chunk: the tolerance of a tile of at most 32.
    PrefillCase as_gpu = c;
    as_gpu.in.tile = std::min(in.tile, kGpuKeyChunk);
    const PrefillColumnSumsRef ref =
        prefill_column_sums_ref(c.q, c.k, c.v, in.tokens, in.n_heads, in.n_kv_heads, in.head_dim, in.window);
    double max_v = 0.0;
    for (float x : c.v) max_v = std::max(max_v, static_cast<double>(std::fabs(x)));
    const std::int64_t d = in.head_dim, width = in.n_heads * d;
    for (std::int64_t h = 0; h < in.n_heads; ++h) {
      const double rel = std::max(testing::prefill_head_tolerance(as_gpu, h), testing::prefill_head_tolerance(c, h));
      for (std::int64_t i = 0; i < in.tokens; ++i) {
        for (std::int64_t ch = 0; ch < d; ++ch) {
          const auto at = static_cast<std::size_t>(i * width + h * d + ch);
          const double want = ref.out(i, h * d + ch);
          if (!(std::fabs(gpu.out[at] - want) <= rel * max_v) || !(std::fabs(gpu.out[at] - cpu.out[at]) <= 2.0 * rel * max_v)) {
            RC_FAIL("out: head " + std::to_string(h) + ", query " + std::to_string(i) + ", channel " +
                    std::to_string(ch) + ": GPU " + std::to_string(gpu.out[at]) + ", CPU " +
                    std::to_string(cpu.out[at]) + ", oracle " + std::to_string(want) + " (" + c.summary + ")");
          }
        }
      }
      const double slack = static_cast<double>(in.tokens) * testing::kProbUnderflow;
      for (std::int64_t j = 0; j < in.tokens; ++j) {
        const auto at = static_cast<std::size_t>(h * in.tokens + j);
        RC_ASSERT(std::fabs(gpu.columns[at] - ref.column_sums[at]) <= rel * ref.column_sums[at] + slack);
        RC_ASSERT(std::fabs(gpu.window[at] - ref.window_sums[at]) <= rel * ref.window_sums[at] + slack);
      }
    }
  });
}

// Pass two only reads what pass one left: asking for the sums changes no output bit, and the
// same call twice gives the same bits (no atomics anywhere).
TEST(PrefillAttentionGpu, SumsChangeNothingAndRunsRepeatBitForBit) {
  KVCHECK_REQUIRE_GPU();
  check_property("prefill attention/GPU deterministic", kCases / 4, [] {
    const PrefillCase c = testing::draw_prefill_case();
    const PrefillRun a = run(c.in, true);
    const PrefillRun b = run(c.in, true);
    const PrefillRun no_sums = run(c.in, true, false);
    RC_ASSERT(std::memcmp(a.out.data(), b.out.data(), a.out.size() * sizeof(float)) == 0);
    RC_ASSERT(std::memcmp(a.columns.data(), b.columns.data(), a.columns.size() * sizeof(float)) == 0);
    RC_ASSERT(std::memcmp(a.window.data(), b.window.data(), a.window.size() * sizeof(float)) == 0);
    RC_ASSERT(std::memcmp(a.out.data(), no_sums.out.data(), a.out.size() * sizeof(float)) == 0);
  });
}

}  // namespace
}  // namespace kvcheck
