// The per-step oracle (oracles/step_oracle.h) attached to an engine's runner trace: the one
// `kvcheck verify --verify-each-step` and the report gate CI with, and the one the per-step policy
// property (properties/optimized/policy_step_props.cpp) runs, so the two cannot drift. It keeps a
// shadow of every key and value row the runner computes (exact floats, before any rounding or
// eviction) and, at every decode step, layer and kv head, checks the engine's attention against
// exact attention over the tokens the cache holds (dequantized as their tier stores them: a
// demoted token as the high tier's format, then the low tier's) and against the bound around
// exact attention over the whole context.
//
// It sits above optimized/ and the plain oracles (library kvcheck_engine_oracle): it reads the
// engine's cache, the oracles read spans.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "optimized/engine.h"
#include "oracles/held_rows_ref.h"
#include "oracles/held_set_builders.h"
#include "oracles/step_oracle.h"

namespace kvcheck {

// One decode head's check as an observer sees it (the policy property checks the held set too).
struct EngineStepHead {
  const DecodeHeadTrace& step;
  std::span<const LiveToken> live;  // the head's live tokens after the step, in walk order
  std::span<const SlotRef> slots;   // their slots, in the same order
  const DecodeStepCheck& check;     // the oracle's verdict on this head's step
  // The held set the check used (after the policy's builders): positions ascending, and their
  // rows as stored, dequantized, in the check's space ([held][head_dim]).
  std::span<const std::int32_t> held;
  std::span<const float> held_keys, held_values;
};

class EngineStepOracle {
 public:
  using Observer = std::function<void(const EngineStepHead&)>;
  // Attaches itself to engine.runner (detached in the destructor); `observe`, if set, is called
  // after every check.
  explicit EngineStepOracle(Engine& engine, std::int64_t max_reports = 20, Observer observe = {});
  ~EngineStepOracle();
  EngineStepOracle(const EngineStepOracle&) = delete;
  EngineStepOracle& operator=(const EngineStepOracle&) = delete;

  // `observe`, if set, is called with every prefill's head scores (layer-major, kv-head minor)
  // before the policy selects from them (RunnerTrace::on_prompt_scores): the claims of a policy
  // that ranks tokens across heads check its choice against them.
  using PromptObserver = std::function<void(std::int64_t kv_heads, std::span<const PromptScores> heads)>;
  void observe_prompt(PromptObserver observe);

  // Starts a request: its steps are reported under `label` (e.g. "prompt 3 (heldout ...)").
  void begin(std::string label);

  // Reuse of held rows between checks (on by default; see HeldRowsMemo), and of the rows a
  // builder derives from the exact ones (DerivedRowsMemo: a rotation's). Off: every check derives
  // every row afresh (held_rows_ref), as the memo's property compares against.
  void set_held_rows_memo(bool on) {
    memo_on_ = on;
    memos_.clear();
    derived_memos_.clear();
  }
  // Held rows (one per held token and check) taken from the memo, and derived afresh.
  std::int64_t held_rows_reused() const { return rows_reused_; }
  std::int64_t held_rows_derived() const { return rows_derived_; }

  std::int64_t checks() const { return checks_; }
  std::int64_t violations() const { return held_violations_ + full_violations_ + selection_violations_; }
  // Printed lines, one per violation, up to max_reports.
  const std::vector<std::string>& reports() const { return reports_; }
  nlohmann::json summary() const;

 private:
  void on_kv(std::int32_t layer, std::int32_t first, std::int64_t tokens, std::span<const float> keys,
             std::span<const float> values);
  // Builds the head's held set (oracles/held_set_builders.h: the plain derivation and the policy's
  // builders) and checks the step against it.
  void on_decode_head(const DecodeHeadTrace& step);

  // The held rows of a head's previous check, with everything each was derived from, so that a
  // check derives afresh only the rows whose inputs changed. held_rows_ref gives a token's rows
  // as a function of: its input rows (the exact rows, or the ones a builder says the cache
  // quantized), its tier and demotion, the tiers' formats, the residual flag, the FP8 scales
  // (held_rows_fp8_scales) and page size; and for a residual policy's tier-1 token, of its whole
  // group's (the same G positions, each with those inputs). A row is reused only when all of that
  // is bit for bit what it was; anything else is derived again.
  struct HeldRowsMemo {
    enum class Kind : std::uint8_t { kNone, kSingle, kGroup };
    struct Entry {
      Kind kind = Kind::kNone;
      int tier = 0;
      bool demoted = false;
      std::uint64_t group = 0;  // kGroup: the derivation's group id, and this row's index in it
      std::int64_t index = 0;
    };
    std::vector<KvTier> tiers;
    bool residual = false;
    std::int64_t head_dim = 0, page_tokens = 0;
    float fixed_scale[2] = {0.0f, 0.0f}, scale[2] = {0.0f, 0.0f};
    std::vector<Entry> entries;                  // [position]
    std::vector<float> in_k, in_v, out_k, out_v;  // [position][head_dim]: the input rows and the held rows
    std::uint64_t next_group = 1;
  };
  void memo_held_rows(HeldRowsMemo& m, const HeldRowsSpec& spec, std::span<const float> keys,
                      std::span<const float> values, std::span<const HeldToken> held, std::vector<float>& held_keys,
                      std::vector<float>& held_values);

  Engine& engine_;
  RunnerTrace trace_;
  std::int64_t max_reports_;
  Observer observe_;
  std::string label_;
  std::vector<std::vector<float>> keys_, values_;  // [layer][position * kv_dim]
  std::int64_t prompt_len_ = 0;  // rows of the last prefill (FP8 heads take their scale from them)
  // (layer, kv head, position) of tokens moved from the high tier to the low one: the cache
  // re-quantizes them from their high codes, so the oracle applies both formats in turn.
  std::set<std::tuple<std::int32_t, std::int32_t, std::int32_t>> demoted_;
  std::int64_t checks_ = 0, held_violations_ = 0, full_violations_ = 0, selection_violations_ = 0;
  double held_error_max_ = 0.0, full_error_max_ = 0.0, pruned_mass_max_ = 0.0, delta_max_ = 0.0;
  double bound_use_max_ = 0.0;  // max over checks of full_error / full_bound
  std::vector<std::string> reports_;
  bool memo_on_ = true;
  std::int64_t rows_reused_ = 0, rows_derived_ = 0;
  std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t>, HeldRowsMemo> memos_;  // (request, layer, kv head)
  // A builder's rows derived from the exact keys and values (HeldSet::derived_keys, _values).
  std::map<std::tuple<std::int64_t, std::int32_t, std::int32_t>, std::pair<DerivedRowsMemo, DerivedRowsMemo>>
      derived_memos_;
  HeldSet scratch_;  // on_decode_head's working set, reused from call to call
};

}  // namespace kvcheck
