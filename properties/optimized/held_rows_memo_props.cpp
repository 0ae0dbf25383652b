// The per-step oracle's held-row memo (EngineStepOracle::HeldRowsMemo) changes what the oracle
// costs, never what it computes: one request run twice, on two identical engines, under an
// oracle with the memo and one without, gives every check the same held positions, the same held
// rows bit for bit, the same verdict and numbers, and the same summary and reports. The policies
// cover every way a held row is derived: one tier (fp16, int4, fp8 with the prompt's or per-page
// scales), rotated rows (int4 and KIVI with a Hadamard rotation), demotion (LeanKV), a residual
// tier quantized in groups (KIVI, MiniKV), eviction (H2O, SnapKV) and page selection (Quest).
//
//   build/properties/kvcheck_property_tests --gtest_filter='EngineStepOracleMemoProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "optimized/engine.h"
#include "oracles/engine_step_oracle.h"
#include "properties/support/model_fixtures.h"
#include "properties/support/property_check.h"

namespace kvcheck::testing {
namespace {

struct CheckRecord {
  std::int32_t layer = 0, kv_head = 0, position = 0;
  std::vector<std::int32_t> held;
  std::vector<float> held_keys, held_values;
  DecodeStepCheck check;
};

struct OracleRun {
  std::vector<CheckRecord> checks;
  nlohmann::json summary;
  std::vector<std::string> reports;
  std::vector<std::int32_t> generated;
  std::int64_t reused = 0, derived = 0;
};

struct MemoCase {
  TinyShape shape;
  std::uint64_t seed = 0;
  std::int64_t prompt = 1, steps = 1, page_bytes = 256;
};

OracleRun run_oracle(const MemoCase& c, const std::string& spec, bool memo) {
  const ModelConfig config = tiny_config(c.shape);
  const ReferenceModel model = tiny_model(config, c.seed);
  EngineOptions o;
  o.page_bytes = c.page_bytes;
  o.pages = 512;
  o.threads = 1;
  o.poison = true;
  std::unique_ptr<Engine> e = make_engine(model, o, make_policy(spec));
  OracleRun run;
  EngineStepOracle oracle(*e, 1000, [&](const EngineStepHead& h) {
    run.checks.push_back(CheckRecord{h.step.layer, h.step.kv_head, h.step.position,
                                     {h.held.begin(), h.held.end()},
                                     {h.held_keys.begin(), h.held_keys.end()},
                                     {h.held_values.begin(), h.held_values.end()},
                                     h.check});
  });
  oracle.set_held_rows_memo(memo);
  oracle.begin(spec);
  EngineGenerateOptions go;
  go.max_new_tokens = c.steps;
  go.stop_at_eos = false;
  const std::vector<std::int32_t> prompt = test_tokens(c.prompt, config.vocab_size, c.seed + 1);
  run.generated = engine_generate(*e, 0, prompt, go).generated;
  run.summary = oracle.summary();
  run.reports = oracle.reports();
  run.reused = oracle.held_rows_reused();
  run.derived = oracle.held_rows_derived();
  return run;
}

bool same_floats(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

bool same_check(const DecodeStepCheck& a, const DecodeStepCheck& b) {
  return same_bits(a.held_error, b.held_error) && same_bits(a.held_tolerance, b.held_tolerance) &&
         same_bits(a.full_error, b.full_error) && same_bits(a.full_bound, b.full_bound) &&
         same_bits(a.quant_bound, b.quant_bound) && same_bits(a.prune_bound, b.prune_bound) &&
         same_bits(a.pruned_mass, b.pruned_mass) && same_bits(a.delta, b.delta) &&
         a.held_violated == b.held_violated && a.full_violated == b.full_violated;
}

// "" when the memoized run computed exactly what the plain one did.
std::string compare(const OracleRun& memo, const OracleRun& plain) {
  if (memo.generated != plain.generated) return "the two engines generated different tokens";
  if (memo.checks.size() != plain.checks.size()) {
    return fmt::format("{} checks with the memo, {} without", memo.checks.size(), plain.checks.size());
  }
  for (std::size_t i = 0; i < memo.checks.size(); ++i) {
    const CheckRecord &a = memo.checks[i], &b = plain.checks[i];
    const std::string at = fmt::format("check {} (layer {}, kv head {}, position {})", i, b.layer, b.kv_head, b.position);
    if (a.layer != b.layer || a.kv_head != b.kv_head || a.position != b.position) return at + ": different heads";
    if (a.held != b.held) return at + ": different held positions";
    if (!same_floats(a.held_keys, b.held_keys)) return at + ": different held keys";
    if (!same_floats(a.held_values, b.held_values)) return at + ": different held values";
    if (!same_check(a.check, b.check)) return at + ": different verdicts: " + a.check.describe() + " vs " + b.check.describe();
  }
  if (memo.summary.dump() != plain.summary.dump()) return "summaries differ: " + memo.summary.dump() + " vs " + plain.summary.dump();
  if (memo.reports != plain.reports) return "reports differ";
  if (plain.reused != 0) return "the plain oracle reused rows";
  if (memo.reused + memo.derived != plain.derived) {
    return fmt::format("{} + {} rows with the memo, {} without", memo.reused, memo.derived, plain.derived);
  }
  return "";
}

struct MemoPolicy {
  std::string spec;
  bool large_pages = false;  // a per-channel key group of 16 tokens needs pages of a few KB
};

// Parameters small enough that a few steps demote, evict, flush residual groups and choose pages.
const std::vector<MemoPolicy>& memo_policies() {
  static const std::vector<MemoPolicy> policies = {
      {"full-fp16"},
      {"int4"},
      {"int4:rotate=hadamard"},
      {"fp8"},
      {"fp8:scale=page", true},
      {"kivi2:group=16,residual=16", true},
      {"kivi4:group=16,residual=16,rotate=hadamard-signs,rotate_seed=7", true},
      {"minikv:budget=16,recent=0.5,group=16,value_group=8,residual=16", true},
      {"leankv:window=4"},
      {"leankv:window=2,alpha_h=2,alpha_l=0.5,high_k=4,high_v=4,low_k=2,low_v=2,rotate=hadamard"},
      {"h2o:budget=8,recent=0.25"},
      {"snapkv:budget=8,window=4,pool=3"},
      {"quest:pages=1"},
  };
  return policies;
}

TEST(EngineStepOracleMemoProps, MemoGivesExactlyTheUnmemoizedHeldRowsAndVerdicts) {
  for (const MemoPolicy& p : memo_policies()) {
    std::int64_t reused = 0;
    check_property("held-row memo: " + p.spec, 12, [&] {
      MemoCase c;
      c.shape.layers = *rc::gen::inRange<std::int64_t>(1, 3);
      c.shape.kv_heads = *rc::gen::element<std::int64_t>(1, 2);
      c.shape.heads = c.shape.kv_heads * *rc::gen::element<std::int64_t>(1, 2);
      c.shape.head_dim = *rc::gen::element<std::int64_t>(8, 16);
      c.shape.hidden = c.shape.heads * 8;
      c.shape.max_positions = 96;
      c.seed = *rc::gen::inRange<std::uint64_t>(0, 1000000);
      c.prompt = *rc::gen::inRange<std::int64_t>(1, 48);
      c.steps = *rc::gen::inRange<std::int64_t>(2, 40);
      c.page_bytes = (p.large_pages ? 8 : 1) * *rc::gen::element<std::int64_t>(256, 512);
      const OracleRun memo = run_oracle(c, p.spec, true);
      const OracleRun plain = run_oracle(c, p.spec, false);
      const std::string failure = compare(memo, plain);
      if (!failure.empty()) RC_FAIL(p.spec + ": " + failure);
      reused += memo.reused;
    });
    // Not vacuous: over the cases, later steps reuse rows.
    EXPECT_GT(reused, 0) << p.spec;
  }
}

}  // namespace
}  // namespace kvcheck::testing
