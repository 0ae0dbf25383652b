// The per-step policy property's harness: runs one request on a small random model under a
// policy, with the per-step oracle the CLI gates on (oracles/engine_step_oracle.h) attached, and
// after every decode step of every layer and kv head hands the head to the policy's claims (its
// row in properties/optimized/policy_step_table.h: which tokens it holds, at which tier, with
// which scores). The first failure, of the oracle or of a claim, is the case's result.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "optimized/kv_policy.h"
#include "optimized/paged_kv_cache.h"
#include "properties/support/model_fixtures.h"

namespace kvcheck::testing {

// The model, prompt and length of one case.
struct PolicyStepCase {
  TinyShape shape;
  std::uint64_t seed = 0;
  std::int64_t page_bytes = 256, prompt = 1, steps = 1;
};

// A random case (RapidCheck generators: call inside a property).
PolicyStepCase gen_policy_step_case();

// A head's last step, kept for the next one (the scores an accumulating policy adds).
struct HeadRecord {
  std::vector<LiveToken> live;
  std::vector<SlotRef> slots;
  std::vector<float> probs;      // the step's slot probabilities, in walk order
  std::int64_t high_pages = 0;   // pages of the high tier then (the low tier's walk starts after them)
};

// What a claim remembers of a head between steps.
struct HeadMemory {
  std::set<std::int32_t> prompt_kept;  // the prompt positions held at the previous step
  std::set<std::int32_t> low;          // the positions in the low tier at the previous step
  std::int64_t high_pages = 0;         // high-tier pages at the previous step
  bool seen = false;                   // a previous step was checked
};

// One layer and kv head just after a decode step, as a claim sees it.
class HeadStep {
 public:
  std::int32_t layer = 0, kv_head = 0;
  std::int32_t position = 0;            // p: the position this step added
  std::int64_t prompt_len = 0;          // T
  std::int64_t layers = 0, kv_heads = 0;  // the model's
  std::int64_t tokens_per_page = 0;     // of the high tier
  std::span<const LiveToken> live;      // in walk order
  std::set<std::int32_t> held;          // the positions of `live`
  std::vector<std::int64_t> high_page_live;  // live tokens of each high-tier page, in table order

  // Records a failure (the first one wins), located at this head and step.
  void fail(const std::string& what) const { fail_(what); }
  // The held positions below the prompt length.
  std::set<std::int32_t> prompt_part() const;
  // Fails unless every position of [from, to] is held.
  void require_held(std::int32_t from, std::int32_t to, const std::string& what) const;
  // The previous step's live tokens with the probability that step gave each added to its score:
  // the scores an accumulating policy holds now, and the ones its decision was made on. nullopt
  // at a head's first step.
  std::optional<std::vector<LiveToken>> scored_before() const;
  // Fails unless every live token but the new one carries exactly the score scored_before() gives
  // it (H2O's and LeanKV's bookkeeping); returns scored_before().
  std::optional<std::vector<LiveToken>> require_accumulated_scores() const;

  std::function<void(const std::string&)> fail_;
  const HeadRecord* last = nullptr;  // null at the first step
  std::int64_t tokens_per_low_page = 0;
};

// After the request: every head's memory, for claims across heads and layers (XKV's budgets).
struct PolicyRunEnd {
  std::map<std::pair<std::int32_t, std::int32_t>, HeadMemory> heads;  // (layer, kv head)
  std::int64_t prompt_len = 0, layers = 0, kv_heads = 0;
  // The prefill's observation-window column sums of each head ([layer * kv_heads + head][prompt
  // position], the maximum over its query group), as the policy got them; empty for a policy
  // without an observation window.
  std::vector<std::vector<float>> window_scores;
};

// A policy with its parameters drawn: its spec and what it claims.
struct DrawnPolicy {
  std::string spec;
  std::function<void(const HeadStep&, HeadMemory&)> check;  // after every decode step of every head
  std::function<std::string(const PolicyRunEnd&)> check_run = {};  // after the request: "" or the failure
  bool large_pages = false;  // pages 8x larger (a per-channel key group of 16 tokens needs them)
};

// Runs `c` under `policy` (which claims to be `drawn`) and returns the first violation of the
// per-step oracle or of the claims, or "" when every step of every layer and head holds.
std::string run_policy_steps(const PolicyStepCase& c, const DrawnPolicy& drawn, std::unique_ptr<KvPolicy> policy);

}  // namespace kvcheck::testing
