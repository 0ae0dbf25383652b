// The per-step policy property's table (properties/optimized/policy_step_props.cpp): one row per
// registered policy, {kind, random parameters, expected-held-set check}. Each policy's parameters
// are a struct of named fields that writes its own spec; its check runs after every decode step
// of every layer and kv head (properties/support/policy_steps.h), besides the per-step oracle
// every row gets. The planted-bug test (policy_planted_bugs_props.cpp) claims fixed parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "optimized/step_decision.h"
#include "properties/support/policy_steps.h"

namespace kvcheck::testing {

// A quantizing policy's rotation parameters (rotate=hadamard, optimized/rotated_policy.h): "" (none),
// or appended to its spec. The per-step oracle checks a rotated policy in its rotated space.
std::string draw_rotation();  // RapidCheck generators: inside a property

// Every token kept at one tier (full-fp32, full-fp16, fp8, int8, int4, kv-bits, rotated or not;
// quest, which reads only some pages of them at each step).
struct UniformCase {
  std::string name;  // the whole spec
  std::string spec() const { return name; }
};
void check_uniform(const UniformCase& c, const HeadStep& s, HeadMemory& m);

// StreamingLLM: exactly the sinks and the recent window.
struct StreamingCase {
  std::int64_t sinks = 0, window = 1;
  std::string spec() const;
};
void check_streaming(const StreamingCase& c, const HeadStep& s, HeadMemory& m);

// H2O: min(context, budget) tokens, the recent window among them; scores accumulate; the token
// that leaves is the lowest-scored outside the window (ties: the oldest).
struct H2oCase {
  std::int64_t budget = 1;
  double recent = 0.5;  // share of the budget for the recent window
  std::int64_t recent_tokens() const;  // round(budget * recent), in [1, budget]
  std::string spec() const;
};
void check_h2o(const H2oCase& c, const HeadStep& s, HeadMemory& m);

// SpvLLM: H2O's tokens, and the pages its slot strategy leaves.
struct SpvLlmCase {
  H2oCase h2o;
  SlotStrategy strategy = SlotStrategy::kSlotReuse;
  std::string spec() const;
};
void check_spvllm(const SpvLlmCase& c, const HeadStep& s, HeadMemory& m);

// SnapKV: every generated token, the observation window, min(prompt, budget) prompt tokens chosen
// at prefill and never changed.
struct SnapKvCase {
  std::int64_t budget = 2, window = 1, pool = 1;
  std::string spec() const;
};
void check_snapkv(const SnapKvCase& c, const HeadStep& s, HeadMemory& m);

// PyramidKV: SnapKV's claim with the layer's budget (pyramid_budgets).
struct PyramidKvCase {
  std::int64_t budget = 2;
  double ratio = 1.0;  // first-to-last layer budget ratio
  std::int64_t window = 1, pool = 1;
  std::string spec() const;
};
void check_pyramidkv(const PyramidKvCase& c, const HeadStep& s, HeadMemory& m);

// XKV: every generated token and the window, the prompt selection fixed at prefill, the same
// count in every head of a layer, the layers' counts summing to the total (after the request).
struct XkvCase {
  std::int64_t budget = 2, window = 1, pool = 1;
  std::string spec() const;
  std::string check_run(const PolicyRunEnd& end) const;
};
void check_xkv(const XkvCase& c, const HeadStep& s, HeadMemory& m);

// Ada-KV: every generated token and the window, the prompt selection fixed at prefill; after the
// request, per layer, each head's candidates exactly the joint top-scoring (head, token) pairs
// above its own floor, the heads' counts summing to kv_heads * the layer's budget.
struct AdaKvCase {
  std::int64_t budget = 2;
  bool pyramid = false;  // base=pyramidkv
  double floor = 0.2, ratio = 20.0;
  std::int64_t window = 1, pool = 1;
  std::string spec() const;
  std::string check_run(const PolicyRunEnd& end) const;
};
void check_adakv(const AdaKvCase& c, const HeadStep& s, HeadMemory& m);

// DuoAttention: a retrieval head holds every position, a streaming head exactly the sinks and the
// recent window.
struct DuoCase {
  double retrieval = 0.25;
  std::int64_t sinks = 0, recent = 1;
  std::vector<std::int64_t> heads;  // the retrieval heads (empty: the first ceil(retrieval * all))
  std::string spec() const;
  bool retrieves(std::int64_t layer, std::int64_t head, std::int64_t layers, std::int64_t kv_heads) const;
};
void check_duo(const DuoCase& c, const HeadStep& s, HeadMemory& m);

// LeanKV's tier bit widths.
struct LeanKvBits {
  int high_k = 8, high_v = 4, low_k = 4, low_v = 2;
};

// LeanKV (dynamic): the recent window at high; the scores; exactly Algorithm 1's moves and drops.
struct LeanKvCase {
  double alpha_h = 1.0, alpha_l = 0.02;
  std::int64_t window = 1;
  LeanKvBits bits = {};
  std::string rotation;  // "" or rotate=...
  std::string spec() const;
};
void check_leankv(const LeanKvCase& c, const HeadStep& s, HeadMemory& m);

// LeanKV (static): the window at high plus exactly leankv_static_counts' high and low counts, and
// exactly the static rule's moves and drops.
struct StaticLeanKvCase {
  std::int64_t high = 0, low = 0;  // static_high, static_low
  std::int64_t window = 1;
  LeanKvBits bits = {};
  std::string spec() const;
};
void check_static_leankv(const StaticLeanKvCase& c, const HeadStep& s, HeadMemory& m);

// KIVI: every token; an fp16 residual of 1..n_r tokens, the oldest tokens quantized in whole
// groups, append-only.
struct KiviCase {
  int bits = 2;
  std::int64_t group = 16, residual = 16;  // G, n_r
  std::string rotation;                    // "" or rotate=...
  std::string spec() const;
  static constexpr bool kLargePages = true;
};
void check_kivi(const KiviCase& c, const HeadStep& s, HeadMemory& m);

// MiniKV: KIVI's tiers over a prompt selection fixed at prefill (the layer's budget, the recent
// share of it kept), every generated token.
struct MiniKvCase {
  std::int64_t budget = 2;
  double recent = 0.5, pyramid = 1.0;
  std::int64_t group = 16, residual = 16, value_group = 8;
  std::int64_t recent_tokens() const;
  std::string spec() const;
  static constexpr bool kLargePages = true;
};
void check_minikv(const MiniKvCase& c, const HeadStep& s, HeadMemory& m);

// A policy with fixed parameters, as the harness runs it: its spec, its check, and (when the case
// has them) its check after the request and its large pages.
template <class Case>
DrawnPolicy claim(const Case& c, void (*check)(const Case&, const HeadStep&, HeadMemory&)) {
  DrawnPolicy d{c.spec(), [c, check](const HeadStep& s, HeadMemory& m) { check(c, s, m); }};
  if constexpr (requires(const PolicyRunEnd& e) { c.check_run(e); }) {
    d.check_run = [c](const PolicyRunEnd& e) { return c.check_run(e); };
  }
  if constexpr (requires { Case::kLargePages; }) d.large_pages = Case::kLargePages;
  return d;
}

// One row of the table.
struct PolicyRow {
  std::string kind;                   // the registered policy name its specs name
  std::function<DrawnPolicy()> draw;  // random parameters (RapidCheck generators: inside a property)
};

template <class Draw, class Case>
PolicyRow row(std::string kind, Draw draw, void (*check)(const Case&, const HeadStep&, HeadMemory&)) {
  return {std::move(kind), [draw, check] { return claim<Case>(draw(), check); }};
}

// Every row: each registered policy at least once (PolicyStepProps.EveryRegisteredPolicyHasARow).
const std::vector<PolicyRow>& policy_step_table();

}  // namespace kvcheck::testing
