// kvcheck verify --verify-each-step: the per-step oracle (oracles/step_oracle.h) attached to the
// engine's runner trace. It keeps a shadow of every key and value row the runner computes (exact
// floats, before any rounding or eviction) and, at every decode step, layer and kv head, checks
// the engine's attention against exact attention over the tokens the cache holds (dequantized as
// their tier stores them: a demoted token as the high tier's format, then the low tier's) and
// against the bound around exact attention over the whole context.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "optimized/engine.h"

namespace kvcheck::cli {

class VerifyStepOracle {
 public:
  // Attaches itself to engine.runner (detached in the destructor).
  explicit VerifyStepOracle(Engine& engine, std::int64_t max_reports = 20);
  ~VerifyStepOracle();
  VerifyStepOracle(const VerifyStepOracle&) = delete;
  VerifyStepOracle& operator=(const VerifyStepOracle&) = delete;

  // Starts a request: its steps are reported under `label` (e.g. "prompt 3 (heldout ...)").
  void begin(std::string label);

  std::int64_t checks() const { return checks_; }
  std::int64_t violations() const { return held_violations_ + full_violations_; }
  // Printed lines, one per violation, up to max_reports.
  const std::vector<std::string>& reports() const { return reports_; }
  nlohmann::json summary() const;

 private:
  void on_kv(std::int32_t layer, std::int32_t first, std::int64_t tokens, std::span<const float> keys,
             std::span<const float> values);
  void on_decode_head(const DecodeHeadTrace& step);

  Engine& engine_;
  RunnerTrace trace_;
  std::int64_t max_reports_;
  std::string label_;
  std::vector<std::vector<float>> keys_, values_;  // [layer][position * kv_dim]
  // (layer, kv head, position) of tokens moved from the high tier to the low one: the cache
  // re-quantizes them from their high codes, so the oracle applies both formats in turn.
  std::int64_t prompt_len_ = 0;  // rows of the last prefill (FP8 heads take their scale from them)
  std::set<std::tuple<std::int32_t, std::int32_t, std::int32_t>> demoted_;
  std::int64_t checks_ = 0, held_violations_ = 0, full_violations_ = 0;
  double held_error_max_ = 0.0, full_error_max_ = 0.0, pruned_mass_max_ = 0.0, delta_max_ = 0.0;
  double bound_use_max_ = 0.0;  // max over checks of full_error / full_bound
  std::vector<std::string> reports_;
};

}  // namespace kvcheck::cli
