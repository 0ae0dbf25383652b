#include "optimized/kv_policy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <utility>

#include "optimized/eviction_policies.h"
#include "optimized/fp8_policy.h"
#include "optimized/kivi_policy.h"
#include "optimized/leankv_policy.h"
#include "optimized/spvllm_policy.h"
#include "optimized/xkv_policy.h"
#include "reference/errors.h"

namespace kvcheck {

std::vector<std::int32_t> KvPolicy::select_prompt(std::int32_t, std::int64_t prompt_len, const PromptScores&) const {
  std::vector<std::int32_t> all(static_cast<std::size_t>(prompt_len));
  std::iota(all.begin(), all.end(), 0);
  return all;
}

std::optional<std::size_t> KvPolicy::select_victim(std::int32_t, std::span<const LiveToken>, std::int32_t) const {
  return std::nullopt;
}

PromptSelection KvPolicy::select_prompt_tiers(std::int32_t layer, std::int64_t prompt_len,
                                              const PromptScores& scores) const {
  return {select_prompt(layer, prompt_len, scores), {}};
}

std::vector<PromptSelection> KvPolicy::select_prompt_all(std::int64_t prompt_len, std::int64_t kv_heads,
                                                         std::span<const PromptScores> heads) const {
  std::vector<PromptSelection> out;
  for (std::size_t i = 0; i < heads.size(); ++i) {
    out.push_back(select_prompt_tiers(static_cast<std::int32_t>(static_cast<std::int64_t>(i) / kv_heads), prompt_len,
                                      heads[i]));
  }
  return out;
}

StepDecision KvPolicy::decide_step(std::int32_t layer, std::span<const LiveToken> live,
                                   std::int32_t new_position) const {
  return {select_victim(layer, live, new_position), std::nullopt};
}

namespace {

// Every token at one tier, never evicted.
class UniformPolicy final : public KvPolicy {
 public:
  UniformPolicy(std::string name, std::string description, KvTier tier)
      : name_(std::move(name)), description_(std::move(description)), tier_(tier) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  std::vector<KvTier> tiers() const override { return {tier_}; }

 private:
  std::string name_;
  std::string description_;
  KvTier tier_;
};

struct Param {
  std::string key;
  double value;  // the default (a list's default is empty)
  double min, max;  // of the value, or of every entry of a list
  bool integer;
  std::string help;
  bool list = false;  // a list of numbers separated by '/' (',' separates the parameters)
  std::vector<std::string> choices = {};  // a named choice: the value is the index of the name given
};

// One number of a spec, or InputError naming the policy and the parameter.
double parse_number(const std::string& policy, const Param& d, const std::string& text, const std::string& whole) {
  double v = 0.0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !std::isfinite(v)) {
    throw InputError(d.list ? fmt::format("policy '{}': parameter '{}' needs numbers separated by '/', got '{}'",
                                          policy, d.key, whole)
                            : fmt::format("policy '{}': parameter '{}' needs a number, got '{}'", policy, d.key, text));
  }
  if (d.integer && v != std::floor(v)) {
    throw InputError(fmt::format("policy '{}': parameter '{}' must be {}, got {}", policy, d.key,
                                 d.list ? "integers" : "an integer", d.list ? whole : text));
  }
  if (v < d.min || v > d.max) {
    throw InputError(fmt::format("policy '{}': parameter '{}' {}= {} is outside [{}, {}]", policy, d.key,
                                 d.list ? "entry " : "", text, d.min, d.max));
  }
  return v;
}

// The parameters of one spec, defaults overridden by `key=value` pairs.
class Params {
 public:
  Params(const std::string& policy, const std::vector<Param>& declared, const std::string& assignments)
      : policy_(policy) {
    for (const Param& p : declared) values_[p.key] = p.value;
    std::size_t at = 0;
    while (at < assignments.size()) {
      const std::size_t end = std::min(assignments.find(',', at), assignments.size());
      const std::string item = assignments.substr(at, end - at);
      at = end + 1;
      const std::size_t eq = item.find('=');
      const std::string key = item.substr(0, eq);
      const auto d = std::find_if(declared.begin(), declared.end(), [&](const Param& p) { return p.key == key; });
      if (d == declared.end()) {
        std::vector<std::string> keys;
        for (const Param& p : declared) keys.push_back(p.key);
        throw InputError(fmt::format("policy '{}': unknown parameter '{}'; its parameters: {}", policy, key,
                                     keys.empty() ? std::string("none") : fmt::format("{}", fmt::join(keys, ", "))));
      }
      const std::string text = eq == std::string::npos ? std::string() : item.substr(eq + 1);
      if (!d->choices.empty()) {
        const auto c = std::find(d->choices.begin(), d->choices.end(), text);
        if (c == d->choices.end()) {
          throw InputError(fmt::format("policy '{}': parameter '{}' must be one of {}, got '{}'", policy, key,
                                       fmt::join(d->choices, ", "), text));
        }
        values_[key] = static_cast<double>(c - d->choices.begin());
        continue;
      }
      if (d->list) {
        std::vector<double> entries;
        std::size_t from = 0;
        while (true) {
          const std::size_t slash = std::min(text.find('/', from), text.size());
          entries.push_back(parse_number(policy, *d, text.substr(from, slash - from), text));
          if (slash == text.size()) break;
          from = slash + 1;
        }
        lists_[key] = entries;
        continue;
      }
      values_[key] = parse_number(policy, *d, text, text);
    }
  }
  double operator[](const std::string& key) const { return values_.at(key); }
  // A list parameter's entries (empty when the spec does not set it).
  std::vector<std::int64_t> integers(const std::string& key) const {
    std::vector<std::int64_t> out;
    if (const auto it = lists_.find(key); it != lists_.end()) {
      for (double v : it->second) out.push_back(static_cast<std::int64_t>(v));
    }
    return out;
  }
  std::vector<double> numbers(const std::string& key) const {
    const auto it = lists_.find(key);
    return it == lists_.end() ? std::vector<double>{} : it->second;
  }
  std::int64_t integer(const std::string& key) const { return static_cast<std::int64_t>(values_.at(key)); }
  // InputError unless `ok`.
  void require(bool ok, const std::string& what) const {
    if (!ok) throw InputError(fmt::format("policy '{}': {}", policy_, what));
  }

 private:
  std::string policy_;
  std::map<std::string, double> values_;
  std::map<std::string, std::vector<double>> lists_;
};

struct Entry {
  std::string name;
  std::string description;
  std::vector<Param> params;
  std::function<std::unique_ptr<KvPolicy>(const Params&)> make;
  std::function<std::string(std::int64_t)> at_budget = {};  // empty: keeps every token
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = [] {
    std::vector<Entry> e;
    constexpr double kFloatMin = 1.17549435e-38;  // the smallest normal float: a scale is at least that
    auto uniform = [&](const char* name, const char* description, KvTier tier) {
      e.push_back({name, description, {},
                   [=](const Params&) { return std::make_unique<UniformPolicy>(name, description, tier); }});
    };
    uniform("full-fp32", "every token kept, keys and values in fp32 (must reproduce the reference)",
            {fp32_format(), fp32_format()});
    uniform("full-fp16", "every token kept, keys and values in fp16 (vLLM's default cache)",
            {fp16_format(), fp16_format()});
    e.push_back({"fp8", "every token kept, keys and values FP8 E4M3 with fp32 scales (optimized/fp8_policy.h)",
                 {{"scale", 0, 0, 2, true,
                   "prompt: per head, the prompt's amax / 448 (later tokens beyond it saturate); calibrated: per head, "
                   "measured on held-out windows before any request; page: per page, each page encoded once full "
                   "behind an fp16 residual of one page",
                   false, {"prompt", "calibrated", "page"}},
                  {"margin", 1, 0.125, 64, false, "calibrated: scale = margin x the windows' amax / 448"},
                  {"windows", 8, 1, 4096, true, "calibrated: held-out windows after the evaluated ones"},
                  {"k_scales", 0, kFloatMin, 1e30, false,
                   "calibrated: key scales, one per layer and kv head (layer major); verify and report measure them",
                   true},
                  {"v_scales", 0, kFloatMin, 1e30, false, "calibrated: value scales, as k_scales", true}},
                 [](const Params& p) {
                   Fp8Params f;
                   f.scale = static_cast<Fp8Scale>(p.integer("scale"));
                   f.margin = p["margin"];
                   f.windows = p.integer("windows");
                   f.k_scales = p.numbers("k_scales");
                   f.v_scales = p.numbers("v_scales");
                   const bool calibrated = f.scale == Fp8Scale::kCalibrated;
                   p.require(calibrated || (f.margin == 1 && f.windows == Fp8Params{}.windows &&
                                            f.k_scales.empty() && f.v_scales.empty()),
                             "margin, windows, k_scales and v_scales apply to scale=calibrated");
                   p.require(f.k_scales.size() == f.v_scales.size(), "k_scales and v_scales are given together");
                   return make_fp8_policy(f);
                 }});
    uniform("int8", "every token kept, keys and values int8 per token (fp16 scale and zero)",
            {int_format(per_token(8)), int_format(per_token(8))});
    uniform("int4", "every token kept, keys and values int4 per token (fp16 scale and zero)",
            {int_format(per_token(4)), int_format(per_token(4))});
    e.push_back({"kv-bits", "every token kept, keys and values per-token INT at their own bit widths (16: fp16)",
                 {{"k", 8, 2, 16, true, "key bits (2, 4, 8, 16)"}, {"v", 4, 2, 16, true, "value bits (2, 4, 8, 16)"}},
                 [](const Params& p) {
                   auto format = [&](const char* key) {
                     const std::int64_t b = p.integer(key);
                     p.require(b == 2 || b == 4 || b == 8 || b == 16, fmt::format("{} must be 2, 4, 8 or 16", key));
                     return b == 16 ? fp16_format() : int_format(per_token(static_cast<int>(b)));
                   };
                   const KvTier tier{format("k"), format("v")};
                   return std::make_unique<UniformPolicy>(
                       fmt::format("kv-bits:k={},v={}", p.integer("k"), p.integer("v")),
                       fmt::format("every token kept, {} per token", kv_tier_name(tier)), tier);
                 }});
    constexpr double kMaxTokens = 1 << 20;
    e.push_back({"streaming", "StreamingLLM: attention sinks plus a recent window, fp16",
                 {{"sinks", 4, 0, kMaxTokens, true, "first positions always kept"},
                  {"window", 60, 1, kMaxTokens, true, "most recent positions kept"}},
                 [](const Params& p) { return make_streaming_policy(p.integer("sinks"), p.integer("window")); },
                 [](std::int64_t b) {
                   const std::int64_t sinks = std::min<std::int64_t>(4, b / 2);
                   return fmt::format("streaming:sinks={},window={}", sinks, std::max<std::int64_t>(1, b - sinks));
                 }});
    e.push_back({"h2o", "H2O: heavy hitters by accumulated attention plus a recent window, one eviction per step, fp16",
                 {{"budget", 64, 1, kMaxTokens, true, "tokens per head"},
                  {"recent", 0.5, 0, 1, false, "share of the budget for the most recent positions (at least one)"}},
                 [](const Params& p) { return make_h2o_policy(p.integer("budget"), p["recent"]); },
                 [](std::int64_t b) { return fmt::format("h2o:budget={}", std::max<std::int64_t>(1, b)); }});
    e.push_back({"snapkv", "SnapKV: prompt tokens chosen once by an observation window, generated tokens kept, fp16",
                 {{"budget", 64, 2, kMaxTokens, true, "prompt tokens per head"},
                  {"window", 32, 1, kMaxTokens, true, "observation window (last prompt queries), kept"},
                  {"pool", 7, 1, 101, true, "max-pooling width (odd)"}},
                 [](const Params& p) {
                   p.require(p.integer("window") < p.integer("budget"), "window must be smaller than budget");
                   p.require(p.integer("pool") % 2 == 1, "pool must be odd");
                   return make_snapkv_policy(p.integer("budget"), p.integer("window"), p.integer("pool"));
                 },
                 [](std::int64_t b) {
                   b = std::max<std::int64_t>(2, b);
                   return fmt::format("snapkv:budget={},window={}", b, std::min<std::int64_t>(32, b / 2));
                 }});
    e.push_back({"pyramidkv", "PyramidKV: SnapKV's selection with per-layer prompt budgets falling with depth, fp16",
                 {{"budget", 64, 2, kMaxTokens, true, "mean prompt tokens per head over the layers"},
                  {"ratio", 20, 1, 1000, false, "first-to-last layer budget falls to budget / ratio"},
                  {"window", 8, 1, kMaxTokens, true, "observation window (last prompt queries), kept"},
                  {"pool", 7, 1, 101, true, "max-pooling width (odd)"}},
                 [](const Params& p) {
                   p.require(p.integer("window") < p.integer("budget"), "window must be smaller than budget");
                   p.require(p.integer("pool") % 2 == 1, "pool must be odd");
                   return make_pyramidkv_policy(p.integer("budget"), p["ratio"], p.integer("window"),
                                                p.integer("pool"));
                 },
                 [](std::int64_t b) {
                   b = std::max<std::int64_t>(2, b);
                   return fmt::format("pyramidkv:budget={},window={}", b, std::min<std::int64_t>(8, b / 2));
                 }});
    e.push_back({"xkv", "XKV: SnapKV's selection with per-layer budgets from greedy importance retention, fp16",
                 {{"budget", 64, 2, kMaxTokens, true, "mean prompt tokens per head over the layers"},
                  {"retention", 0, 0, 1, false, "if > 0: allocate until the mean retention reaches it (no budget)"},
                  {"window", 8, 1, kMaxTokens, true, "observation window (last prompt queries), kept"},
                  {"pool", 7, 1, 101, true, "average-pooling width (odd)"},
                  {"layers", 0, 0, kMaxTokens, true,
                   "if set: fixed prompt tokens per head of each layer besides the window, one per layer, e.g. "
                   "40/24/8 (the averaged allocation; verify --xkv-calibrate computes it); replaces budget",
                   true}},
                 [](const Params& p) {
                   XkvParams xp;
                   xp.budget = p.integer("budget");
                   xp.retention = p["retention"];
                   xp.window = p.integer("window");
                   xp.pool = p.integer("pool");
                   xp.layers = p.integers("layers");
                   p.require(xp.layers.empty() || xp.retention == 0, "layers and retention exclude each other");
                   p.require(!xp.layers.empty() || xp.retention > 0 || xp.window < xp.budget,
                             "window must be smaller than budget");
                   p.require(xp.pool % 2 == 1, "pool must be odd");
                   return make_xkv_policy(xp);
                 },
                 [](std::int64_t b) {
                   b = std::max<std::int64_t>(2, b);
                   return fmt::format("xkv:budget={},window={}", b, std::min<std::int64_t>(8, b / 2));
                 }});
    std::vector<std::string> strategies;
    for (const SlotStrategy st : kAllSlotStrategies) strategies.push_back(slot_strategy_name(st));
    e.push_back({"spvllm", "SpvLLM: H2O's eviction with one of SpvLLM's four slot strategies, fp16",
                 {{"budget", 64, 1, kMaxTokens, true, "tokens per head"},
                  {"recent", 0.5, 0, 1, false, "share of the budget for the most recent positions (at least one)"},
                  {"strategy", 3, 0, 3, true, "what happens to an evicted slot: no-op, free-block, sparse-copy, slot-reuse",
                   false, strategies}},
                 [](const Params& p) {
                   return make_spvllm_policy(p.integer("budget"), p["recent"],
                                             kAllSlotStrategies[static_cast<std::size_t>(p.integer("strategy"))]);
                 },
                 [](std::int64_t b) { return fmt::format("spvllm:budget={}", std::max<std::int64_t>(1, b)); }});
    auto kivi_params = [](const Params& p, int bits) {
      const std::int64_t g = p.integer("group");
      p.require(g == 16 || g == 32 || g == 128, "group must be 16, 32 or 128");
      p.require(p.integer("residual") % g == 0, fmt::format("residual must be a multiple of group ({})", g));
      KiviParams k;
      k.bits = bits;
      k.group = g;
      k.residual = p.integer("residual");
      return k;
    };
    for (const int b : {2, 4}) {
      e.push_back({fmt::format("kivi{}", b),
                   fmt::format("KIVI: every token kept, keys int{0} per channel over groups of tokens, values int{0} "
                               "per token, behind an fp16 residual", b),
                   {{"group", 32, 16, 128, true, "G: tokens per key channel group (16, 32, 128)"},
                    {"residual", 128, 16, kMaxTokens, true, "n_r: fp16 residual flushed when full (a multiple of G)"}},
                   [=](const Params& p) { return make_kivi_policy(kivi_params(p, b)); }});
    }
    e.push_back({"minikv",
                 "MiniKV: heavy hitters and a recent window chosen once at prefill, 2-bit KIVI (groups of 16) behind "
                 "an fp16 residual",
                 {{"budget", 64, 2, kMaxTokens, true, "mean prompt tokens kept per head"},
                  {"recent", 0.5, 0, 1, false, "share of the budget for the most recent positions (at least one)"},
                  {"pyramid", 1, 1, 1000, false, "1: uniform layer budgets; > 1: PyramidKV's, the last layer gets "
                                                 "budget / pyramid"},
                  {"group", 16, 16, 128, true, "G: tokens per key channel group (16, 32, 128)"},
                  {"value_group", 16, 1, 1024, true, "g: channels per value group (must divide head_dim)"},
                  {"residual", 128, 16, kMaxTokens, true, "n_r: fp16 residual flushed when full (a multiple of G)"}},
                 [=](const Params& p) {
                   KiviParams q = kivi_params(p, 2);
                   q.value_group = p.integer("value_group");
                   MiniKvParams m;
                   m.budget = p.integer("budget");
                   m.recent = p["recent"];
                   m.pyramid = p["pyramid"];
                   return make_minikv_policy(q, m);
                 },
                 [](std::int64_t b) { return fmt::format("minikv:budget={}", std::max<std::int64_t>(2, b)); }});
    auto bits = [](const char* key, double value, const char* help) {
      return Param{key, value, 2, 16, true, help};
    };
    e.push_back({"leankv",
                 "LeanKV: high / low precision tiers and pruning by attention significance, Algorithm 1 while decoding",
                 {{"alpha_h", 1.0, 0, 1e6, false, "high tier at significance >= alpha_h / N"},
                  {"alpha_l", 0.02, 0, 1e6, false, "low tier at significance >= alpha_l / N, else pruned"},
                  {"window", 64, 1, kMaxTokens, true, "recent positions always at high"},
                  bits("high_k", 8, "high tier key bits (2, 4, 8; 16: fp16)"),
                  bits("high_v", 4, "high tier value bits"),
                  bits("low_k", 4, "low tier key bits"),
                  bits("low_v", 2, "low tier value bits"),
                  {"static_high", -1, -1, kMaxTokens, true,
                   "static mode when >= 0 (with static_low; alphas unused): every head keeps the window plus this "
                   "many of its most significant other tokens at high"},
                  {"static_low", -1, -1, kMaxTokens, true, "static mode: the next this many at low"}},
                 [](const Params& p) {
                   for (const char* key : {"high_k", "high_v", "low_k", "low_v"}) {
                     const std::int64_t b = p.integer(key);
                     p.require(b == 2 || b == 4 || b == 8 || b == 16, fmt::format("{} must be 2, 4, 8 or 16", key));
                   }
                   p.require(p["alpha_l"] <= p["alpha_h"], "alpha_l must not exceed alpha_h");
                   p.require((p.integer("static_high") < 0) == (p.integer("static_low") < 0),
                             "static_high and static_low are set together (both -1: the dynamic mode)");
                   LeanKvParams lp;
                   lp.alpha_h = p["alpha_h"];
                   lp.alpha_l = p["alpha_l"];
                   lp.window = p.integer("window");
                   lp.high_k = static_cast<int>(p.integer("high_k"));
                   lp.high_v = static_cast<int>(p.integer("high_v"));
                   lp.low_k = static_cast<int>(p.integer("low_k"));
                   lp.low_v = static_cast<int>(p.integer("low_v"));
                   lp.static_high = p.integer("static_high");
                   lp.static_low = p.integer("static_low");
                   return make_leankv_policy(lp);
                 }});
    return e;
  }();
  return entries;
}

}  // namespace

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const Entry& e : registry()) names.push_back(e.name);
  return names;
}

std::vector<std::string> policy_help() {
  std::vector<std::string> lines;
  for (const Entry& e : registry()) {
    std::vector<std::string> params;
    for (const Param& p : e.params) {
      const std::string value = p.choices.empty() ? fmt::format("{}", p.value)
                                                  : p.choices[static_cast<std::size_t>(p.value)];
      params.push_back(p.list ? fmt::format("{}=N/N/... ({})", p.key, p.help)
                              : fmt::format("{}={} ({})", p.key, value, p.help));
    }
    lines.push_back(params.empty() ? fmt::format("{}: {}", e.name, e.description)
                                   : fmt::format("{}: {}; {}", e.name, e.description, fmt::join(params, ", ")));
  }
  return lines;
}

std::optional<std::string> policy_spec_at_budget(const std::string& spec, std::int64_t budget) {
  const std::string name = spec.substr(0, spec.find(':'));
  for (const Entry& e : registry()) {
    if (e.name != name) continue;
    if (e.at_budget && name != spec) {
      throw InputError(fmt::format("policy '{}': a policy with a budget is named without parameters here ('{}'); "
                                   "its budgets come from the run", name, spec));
    }
    return e.at_budget ? std::optional<std::string>(e.at_budget(budget)) : std::nullopt;
  }
  throw InputError(fmt::format("policy '{}': unknown; known policies: {}", name, fmt::join(policy_names(), ", ")));
}

std::unique_ptr<KvPolicy> make_policy(const std::string& spec) {
  const std::size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  for (const Entry& e : registry()) {
    if (e.name == name) return e.make(Params(name, e.params, colon == std::string::npos ? "" : spec.substr(colon + 1)));
  }
  throw InputError(fmt::format("policy '{}': unknown; known policies: {}", name, fmt::join(policy_names(), ", ")));
}

}  // namespace kvcheck
