// XKV's Algorithm 1 (optimized/xkv_policy.h) against the optimum it claims: on small random
// instances, the sum of the layers' importance retention ratios it reaches for a total equals
// the best any allocation of that total reaches (dynamic programming over the layers), the
// allocation hands out exactly the total, and the retention mode stops at the first allocation
// whose mean retention reaches the target. A planted variant that ranks raw scores instead of
// normalised ones is shown to miss the optimum.
//
// The averaged allocation (xkv_average_allocation): it sums exactly to the total, each layer gets
// the floor or the ceiling of its mean over the sampled requests, the ceilings go to the largest
// remainders (ties to the lower layer), and one sample gives that request's own allocation;
// planted variants that drop the rounding remainder, round each mean to nearest, or average
// allocations of unnormalised scores are each caught by that check. The fixed-budget policy
// (`xkv:layers=...`) selects exactly what the per-request policy selects once given the same
// allocation, holds n_l + window prompt tokens per head of layer l, and a wrong count of layers
// is an InputError naming the model's layer count, also through the engine's prefill.
//   RC_PARAMS="seed=N" build-cpu/properties/kvcheck_property_tests --gtest_filter='XkvAllocation*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "optimized/engine.h"
#include "optimized/xkv_policy.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::check_property;
using Scores = std::vector<std::vector<double>>;

// R_l(n) for every n: prefix sums of the sorted, normalised scores.
std::vector<std::vector<double>> retention_curves(const Scores& scores) {
  std::vector<std::vector<double>> r;
  for (std::vector<double> w : scores) {
    std::sort(w.begin(), w.end(), std::greater<>());
    const double sum = std::accumulate(w.begin(), w.end(), 0.0);
    std::vector<double> c{0.0};
    for (double x : w) c.push_back(c.back() + (sum > 0 ? x / sum : 0.0));
    r.push_back(c);
  }
  return r;
}

double objective(const Scores& scores, const std::vector<std::int64_t>& n) {
  const auto r = retention_curves(scores);
  double sum = 0.0;
  for (std::size_t l = 0; l < n.size(); ++l) sum += r[l][static_cast<std::size_t>(n[l])];
  return sum;
}

// The best sum of R_l over allocations of exactly `total` (dynamic programming over layers).
double optimum(const Scores& scores, std::int64_t total) {
  const auto r = retention_curves(scores);
  std::vector<double> best(static_cast<std::size_t>(total) + 1, -std::numeric_limits<double>::infinity());
  best[0] = 0.0;
  for (const auto& curve : r) {
    std::vector<double> next(best.size(), -std::numeric_limits<double>::infinity());
    for (std::size_t t = 0; t < best.size(); ++t) {
      for (std::size_t k = 0; k < curve.size() && k <= t; ++k) next[t] = std::max(next[t], best[t - k] + curve[k]);
    }
    best = next;
  }
  return best[static_cast<std::size_t>(total)];
}

Scores gen_scores(std::size_t layers) {
  Scores s;
  for (std::size_t l = 0; l < layers; ++l) {
    // Layers of different sizes and scales: raw and normalised rankings then differ.
    const auto n = *rc::gen::inRange<std::size_t>(1, 8);
    const double scale = *rc::gen::element(0.01, 1.0, 50.0);
    std::vector<double> w;
    for (std::size_t i = 0; i < n; ++i) w.push_back(scale * *rc::gen::inRange<int>(0, 1000) / 1000.0);
    s.push_back(w);
  }
  return s;
}

Scores gen_scores() { return gen_scores(*rc::gen::inRange<std::size_t>(1, 5)); }

std::int64_t available(const Scores& s) {
  std::int64_t n = 0;
  for (const auto& w : s) n += static_cast<std::int64_t>(w.size());
  return n;
}

TEST(XkvAllocation, GreedyReachesTheOptimumForItsTotal) {
  check_property("xkv greedy == DP optimum", 1000, [] {
    const Scores s = gen_scores();
    const std::int64_t total = *rc::gen::inRange<std::int64_t>(0, available(s) + 3);
    const std::vector<std::int64_t> n = xkv_allocate(s, total);
    RC_ASSERT(n.size() == s.size());
    RC_ASSERT(std::accumulate(n.begin(), n.end(), std::int64_t{0}) == std::min(total, available(s)));
    for (std::size_t l = 0; l < n.size(); ++l) RC_ASSERT(n[l] >= 0 && n[l] <= static_cast<std::int64_t>(s[l].size()));
    const double want = optimum(s, std::min(total, available(s)));
    RC_ASSERT(std::abs(objective(s, n) - want) <= 1e-9);
  });
}

TEST(XkvAllocation, RetentionModeStopsAtTheTarget) {
  check_property("xkv retention mode", 500, [] {
    const Scores s = gen_scores();
    const double target = *rc::gen::element(0.1, 0.5, 0.9, 1.0);
    const std::vector<std::int64_t> n = xkv_allocate(s, -1, target);
    const auto layers = static_cast<double>(s.size());
    const double mean = objective(s, n) / layers;
    const std::int64_t handed = std::accumulate(n.begin(), n.end(), std::int64_t{0});
    // Reached (or everything of non-zero weight handed out), and one token fewer (the greedy
    // prefix) had not. The engine sums in greedy order, this in layer order: 1e-12 apart at most.
    const auto attainable = static_cast<double>(std::count_if(s.begin(), s.end(), [](const std::vector<double>& l) {
      return std::accumulate(l.begin(), l.end(), 0.0) > 0.0;  // a layer of any weight can retain all of it
    }));
    RC_ASSERT(mean >= target - 1e-12 || mean >= attainable / layers - 1e-12);
    RC_ASSERT(handed <= available(s));
    if (handed > 0) {
      RC_ASSERT(objective(s, xkv_allocate(s, handed - 1)) / layers < target + 1e-12);
    }
  });
}

// The planted bug: rank raw scores, not each layer's scores over its own sum.
std::vector<std::int64_t> allocate_by_raw_scores(const Scores& scores, std::int64_t total) {
  std::vector<std::pair<double, std::size_t>> all;
  for (std::size_t l = 0; l < scores.size(); ++l) {
    for (double x : scores[l]) all.emplace_back(x, l);
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  std::vector<std::int64_t> n(scores.size(), 0);
  for (std::int64_t i = 0; i < total && i < static_cast<std::int64_t>(all.size()); ++i) ++n[all[static_cast<std::size_t>(i)].second];
  return n;
}

TEST(XkvAllocation, PlantedRawScoreAllocationMissesTheOptimum) {
  std::mt19937_64 rng(7);
  bool caught = false;
  for (int i = 0; i < 200 && !caught; ++i) {
    Scores s(3);
    for (std::size_t l = 0; l < s.size(); ++l) {
      const double scale = l == 0 ? 100.0 : 1.0;
      for (int k = 0; k < 5; ++k) s[l].push_back(scale * static_cast<double>(rng() % 1000) / 1000.0);
    }
    const std::int64_t total = 1 + static_cast<std::int64_t>(rng() % 14);
    caught = objective(s, allocate_by_raw_scores(s, total)) < optimum(s, total) - 1e-9;
  }
  EXPECT_TRUE(caught) << "the DP optimum does not tell raw from normalised allocation";
}

// Found by ci/fuzz.sh's long property rounds (seed 1002): at retention 1.0 the greedy sum fell
// one ulp short of the target once every token of weight was in, and the tokens of zero weight
// were handed out too. They retain nothing and are never handed out to reach a target.
TEST(XkvAllocation, RetentionNeverHandsOutZeroWeight) {
  const Scores s = {{0.1, 0.2, 0.7, 0.0}, {0.3, 0.3, 0.3, 0.0, 0.0}, {0.0, 0.0}};
  EXPECT_EQ(xkv_allocate(s, -1, 1.0), (std::vector<std::int64_t>{3, 3, 0}));
  // Greedy: .7 (layer 0), then layer 1's thirds; (.7 + 1) / 3 >= .5 and (.7 + 2/3) / 3 < .5.
  EXPECT_EQ(xkv_allocate(s, -1, 0.5), (std::vector<std::int64_t>{1, 3, 0}));
}

TEST(XkvAllocation, HandComputedCase) {
  // Layer 0: {3, 1} -> normalised {.75, .25}; layer 1: {1, 1, 2} -> {.5, .25, .25}.
  // Greedy order: .75 (0), .5 (1), then .25 ties -> layer 0 first.
  const Scores s = {{3, 1}, {1, 1, 2}};
  EXPECT_EQ(xkv_allocate(s, 2), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(xkv_allocate(s, 3), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(xkv_allocate(s, 9), (std::vector<std::int64_t>{2, 3}));
  // Mean retention >= .6: after .75 and .5 the mean is .625.
  EXPECT_EQ(xkv_allocate(s, -1, 0.6), (std::vector<std::int64_t>{1, 1}));
  EXPECT_EQ(average_pool(std::vector<float>{3, 0, 0, 6}, 3), (std::vector<float>{1.5f, 1.0f, 2.0f, 3.0f}));
}

using Samples = std::vector<Scores>;
using Averager = std::function<std::vector<std::int64_t>(const Samples&, std::int64_t)>;

// Requests of one model: the same number of layers, each layer's candidate count drawn per
// request (as prompts of different lengths give), enough candidates for `total` in each.
std::pair<Samples, std::int64_t> gen_samples() {
  const auto layers = *rc::gen::inRange<std::size_t>(1, 5);
  const auto k = *rc::gen::inRange<std::size_t>(1, 7);
  Samples samples;
  std::int64_t least = std::numeric_limits<std::int64_t>::max();
  for (std::size_t r = 0; r < k; ++r) {
    const Scores s = gen_scores(layers);
    least = std::min(least, available(s));
    samples.push_back(s);
  }
  return {samples, *rc::gen::inRange<std::int64_t>(0, least + 1)};
}

// "" when `average` is the largest-remainder average of the per-request Algorithm 1
// allocations, else what is wrong.
std::string check_average(const Averager& average, const Samples& samples, std::int64_t total) {
  const std::vector<std::int64_t> n = average(samples, total);
  const std::size_t layers = samples[0].size();
  const auto k = static_cast<std::int64_t>(samples.size());
  if (n.size() != layers) return fmt::format("{} budgets for {} layers", n.size(), layers);
  std::vector<std::int64_t> sums(layers, 0);
  for (const Scores& s : samples) {
    const std::vector<std::int64_t> own = xkv_allocate(s, total);
    for (std::size_t l = 0; l < layers; ++l) sums[l] += own[l];
  }
  if (k == 1 && n != sums) return fmt::format("one sample: {} is not its own allocation {}", fmt::join(n, "/"), fmt::join(sums, "/"));
  const std::int64_t got = std::accumulate(n.begin(), n.end(), std::int64_t{0});
  if (got != total) return fmt::format("{} sums to {}, not the total {}", fmt::join(n, "/"), got, total);
  for (std::size_t l = 0; l < layers; ++l) {
    const std::int64_t floor = sums[l] / k, up = floor + (sums[l] % k != 0 ? 1 : 0);
    if (n[l] != floor && n[l] != up) {
      return fmt::format("layer {} gets {}, its mean is {}/{}", l, n[l], sums[l], k);
    }
  }
  // Every rounded-up layer's remainder beats every rounded-down one's (ties: lower layer first).
  for (std::size_t a = 0; a < layers; ++a) {
    for (std::size_t b = 0; b < layers; ++b) {
      const bool a_up = n[a] > sums[a] / k, b_down = n[b] == sums[b] / k && sums[b] % k != 0;
      if (a_up && b_down && (sums[a] % k < sums[b] % k || (sums[a] % k == sums[b] % k && a > b))) {
        return fmt::format("layer {} rounded up with remainder {}/{}, layer {} down with {}/{}", a, sums[a] % k, k, b,
                           sums[b] % k, k);
      }
    }
  }
  return "";
}

TEST(XkvAllocation, AveragedBudgetsAreTheLargestRemainderMeanOfThePerRequestAllocations) {
  check_property("xkv averaged allocation", 1000, [] {
    const auto [samples, total] = gen_samples();
    const std::string failure = check_average(xkv_average_allocation, samples, total);
    if (!failure.empty()) RC_FAIL(failure);
    RC_TAG(samples.size() == 1 ? "one sample" : "several samples");
  });
}

TEST(XkvAllocation, AveragedHandComputedCase) {
  // A: {3, 1} / {1, 1, 2} -> {2, 1} at 3 (HandComputedCase). B: {1} / {1, 1, 1}: normalised 1,
  // then 1/3 twice -> {1, 2}. Means of A, B: 1.5 / 1.5 -> floors 1 / 1, one token left, equal
  // remainders -> layer 0. Of A, B, B: 4/3, 5/3 -> the left token goes to layer 1.
  const Scores a = {{3, 1}, {1, 1, 2}}, b = {{1}, {1, 1, 1}};
  EXPECT_EQ(xkv_allocate(b, 3), (std::vector<std::int64_t>{1, 2}));
  EXPECT_EQ(xkv_average_allocation({a}, 3), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(xkv_average_allocation({a, b}, 3), (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(xkv_average_allocation({a, b, b}, 3), (std::vector<std::int64_t>{1, 2}));
  EXPECT_THROW(xkv_average_allocation({}, 3), InputError);
  try {
    xkv_average_allocation({a, b}, 5);  // b has 4 candidates
    ADD_FAILURE() << "no error for a sample too short for the total";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("sample 1 has 4 candidate tokens"), std::string::npos) << e.what();
  }
  EXPECT_THROW(xkv_average_allocation({a, {{1, 1}}}, 1), std::invalid_argument);
}

TEST(XkvAllocation, PlantedAveragingBugsAreCaught) {
  const Averager floor_only = [](const Samples& samples, std::int64_t total) {  // drops the remainder
    std::vector<std::int64_t> sums(samples[0].size(), 0);
    for (const Scores& s : samples) {
      const auto n = xkv_allocate(s, total);
      for (std::size_t l = 0; l < n.size(); ++l) sums[l] += n[l];
    }
    for (std::int64_t& x : sums) x /= static_cast<std::int64_t>(samples.size());
    return sums;
  };
  const Averager nearest = [](const Samples& samples, std::int64_t total) {  // each mean rounded alone
    std::vector<double> sums(samples[0].size(), 0.0);
    for (const Scores& s : samples) {
      const auto n = xkv_allocate(s, total);
      for (std::size_t l = 0; l < n.size(); ++l) sums[l] += static_cast<double>(n[l]);
    }
    std::vector<std::int64_t> out;
    for (double x : sums) out.push_back(std::llround(x / static_cast<double>(samples.size())));
    return out;
  };
  const Averager raw = [](const Samples& samples, std::int64_t total) {  // scores not normalised per layer
    std::vector<std::int64_t> sums(samples[0].size(), 0);
    for (const Scores& s : samples) {
      const auto n = allocate_by_raw_scores(s, total);
      for (std::size_t l = 0; l < n.size(); ++l) sums[l] += n[l];
    }
    // Largest remainder as the real one does, so only the missing normalisation differs.
    const auto k = static_cast<std::int64_t>(samples.size());
    std::vector<std::int64_t> out(sums.size());
    std::int64_t left = total;
    for (std::size_t l = 0; l < sums.size(); ++l) left -= (out[l] = sums[l] / k);
    std::vector<std::size_t> order(sums.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sums[a] % k > sums[b] % k; });
    for (std::int64_t i = 0; i < left; ++i) ++out[order[static_cast<std::size_t>(i)]];
    return out;
  };
  const std::vector<std::pair<const char*, Averager>> planted = {
      {"drops the rounding remainder", floor_only}, {"rounds each mean to nearest", nearest}, {"does not normalise", raw}};
  std::mt19937_64 rng(20261124);
  for (const auto& [what, average] : planted) {
    std::string caught;
    for (int i = 0; i < 500 && caught.empty(); ++i) {
      Samples samples(1 + rng() % 4, Scores(1 + rng() % 4));
      for (Scores& s : samples) {
        for (std::size_t l = 0; l < s.size(); ++l) {
          const double scale = l == 0 ? 100.0 : 1.0;
          for (std::size_t j = 0; j < 5; ++j) s[l].push_back(scale * static_cast<double>(rng() % 1000) / 1000.0);
        }
      }
      const std::int64_t total = static_cast<std::int64_t>(rng() % (5 * samples[0].size() + 1));
      caught = check_average(average, samples, total);
    }
    EXPECT_FALSE(caught.empty()) << "planted averaging bug not caught: " << what;
    std::printf("planted averaging bug \"%s\": caught: %s\n", what, caught.c_str());
  }
}

// Random prefill scores of `layers` x `kv_heads` heads over n positions.
struct HeadScores {
  std::vector<std::vector<float>> all, window;
  std::vector<PromptScores> heads;
};

HeadScores gen_heads(std::int64_t layers, std::int64_t kv_heads, std::int64_t n) {
  HeadScores h;
  for (std::int64_t i = 0; i < layers * kv_heads; ++i) {
    h.all.push_back(*rc::gen::container<std::vector<float>>(static_cast<std::size_t>(n), rc::gen::map(rc::gen::inRange(0, 1000), [](int x) { return static_cast<float>(x) / 100.0f; })));
    h.window.push_back(*rc::gen::container<std::vector<float>>(static_cast<std::size_t>(n), rc::gen::map(rc::gen::inRange(0, 1000), [](int x) { return static_cast<float>(x) / 100.0f; })));
  }
  for (std::size_t i = 0; i < h.all.size(); ++i) {
    h.heads.push_back(PromptScores{h.all[i], h.window[i], static_cast<std::int32_t>(layers)});
  }
  return h;
}

TEST(XkvAllocation, FixedBudgetsSelectAsThePerRequestModeDoes) {
  check_property("xkv fixed budgets", 500, [] {
    const auto layers = *rc::gen::inRange<std::int64_t>(1, 4);
    const auto kv_heads = *rc::gen::inRange<std::int64_t>(1, 3);
    const auto n = *rc::gen::inRange<std::int64_t>(1, 30);
    const auto window = *rc::gen::inRange<std::int64_t>(1, 6);
    const auto pool = *rc::gen::element<std::int64_t>(1, 3, 5);
    const auto budget = window + *rc::gen::inRange<std::int64_t>(1, 20);
    const HeadScores h = gen_heads(layers, kv_heads, n);
    // The per-request policy, with the scores it allocates on recorded.
    std::vector<std::vector<double>> seen;
    XkvParams per_request;
    per_request.budget = budget;
    per_request.window = window;
    per_request.pool = pool;
    per_request.on_layer_scores = [&](const std::vector<std::vector<double>>& s) { seen = s; };
    const auto want = make_xkv_policy(per_request)->select_prompt_all(n, kv_heads, h.heads);
    RC_ASSERT(seen == xkv_layer_scores(n, kv_heads, h.heads, window, pool));
    const std::vector<std::int64_t> alloc = xkv_allocate(seen, layers * (budget - window));
    const std::string spec = fmt::format("xkv:layers={},window={},pool={}", fmt::join(alloc, "/"), window, pool);
    const auto fixed = make_policy(spec);
    RC_ASSERT(fixed->name() == spec);
    const auto got = fixed->select_prompt_all(n, kv_heads, h.heads);
    RC_ASSERT(got.size() == want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      RC_ASSERT(got[i].high == want[i].high);
      RC_ASSERT(got[i].low.empty());
    }
    // Any budgets: each head of layer l holds the window and n_l of the older positions.
    std::vector<std::int64_t> budgets;
    for (std::int64_t l = 0; l < layers; ++l) budgets.push_back(*rc::gen::inRange<std::int64_t>(0, 40));
    const auto any = make_policy(fmt::format("xkv:layers={},window={},pool={}", fmt::join(budgets, "/"), window, pool))
                         ->select_prompt_all(n, kv_heads, h.heads);
    const std::int64_t candidates = std::max<std::int64_t>(0, n - window);
    for (std::size_t i = 0; i < any.size(); ++i) {
      const std::int64_t nl = budgets[i / static_cast<std::size_t>(kv_heads)];
      RC_ASSERT(static_cast<std::int64_t>(any[i].high.size()) == std::min(nl, candidates) + std::min(n, window));
      RC_ASSERT(std::is_sorted(any[i].high.begin(), any[i].high.end()));
      for (std::int64_t j = candidates; j < n; ++j) {
        RC_ASSERT(std::binary_search(any[i].high.begin(), any[i].high.end(), static_cast<std::int32_t>(j)));
      }
    }
  });
}

TEST(XkvAllocation, WrongLayerCountIsAnInputErrorAtTheFirstPrefill) {
  const auto policy = make_policy("xkv:layers=4/4/4,window=2");  // parses: the model is not known yet
  std::vector<float> ones(10, 1.0f);
  const std::vector<PromptScores> heads(2, PromptScores{ones, ones, 2});  // 2 layers x 1 kv head
  try {
    policy->select_prompt_all(10, 1, heads);
    ADD_FAILURE() << "no error for 3 budgets on 2 layers";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("policy 'xkv': parameter 'layers' gives 3 budgets (4/4/4), the model has 2 layers"),
              std::string::npos)
        << e.what();
  }
  // Through the engine: the prefill fails, and the request's pages are released.
  testing::TinyShape shape;
  shape.layers = 2;
  const ModelConfig config = testing::tiny_config(shape);
  const ReferenceModel model = testing::tiny_model(config, 3);
  EngineOptions o;
  o.threads = 1;
  o.pages = 64;
  std::unique_ptr<Engine> e = make_engine(model, o, make_policy("xkv:layers=4/4/4,window=2"));
  const std::vector<std::int32_t> prompt = testing::test_tokens(12, config.vocab_size, 5);
  EngineGenerateOptions go;
  go.max_new_tokens = 2;
  try {
    engine_generate(*e, 0, prompt, go);
    ADD_FAILURE() << "no error from the engine";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("the model has 2 layers"), std::string::npos) << err.what();
  }
  // The right count runs, and holds window + n_l prompt tokens per head of layer l.
  e = make_engine(model, o, make_policy("xkv:layers=3/6,window=2"));
  std::vector<std::int64_t> held;
  RunnerTrace trace;
  trace.on_decode_head = [&](const DecodeHeadTrace& s) {
    std::vector<LiveToken> live;
    std::vector<SlotRef> slots;
    e->cache->live_tokens(s.request, s.layer, s.kv_head, live, slots);
    std::int64_t prompt_part = 0;
    for (const LiveToken& t : live) prompt_part += t.position < 12 ? 1 : 0;
    held.push_back(prompt_part - (s.layer == 0 ? 3 : 6));
  };
  e->runner->set_trace(&trace);
  engine_generate(*e, 1, prompt, go);
  ASSERT_FALSE(held.empty());
  for (std::int64_t x : held) EXPECT_EQ(x, 2);  // the window
}

}  // namespace
}  // namespace kvcheck
