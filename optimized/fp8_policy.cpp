#include "optimized/fp8_policy.h"

#include <algorithm>

#include <fmt/format.h>

#include "kernels/cpu/kv_bytes.h"
#include "optimized/policy_registry.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

class Fp8Policy final : public KvPolicy {
 public:
  explicit Fp8Policy(const Fp8Params& p) : p_(p) {}
  const Fp8Params& params() const { return p_; }

  std::string name() const override {
    switch (p_.scale) {
      case Fp8Scale::kPrompt: return "fp8";
      case Fp8Scale::kPage: return "fp8:scale=page";
      case Fp8Scale::kCalibrated: {
        // The scales are not spelled out: a spec without them is calibrated again, the same way.
        std::string n = "fp8:scale=calibrated";
        if (p_.margin != 1.0) n += fmt::format(",margin={}", p_.margin);
        if (p_.windows != Fp8Params{}.windows) n += fmt::format(",windows={}", p_.windows);
        return n;
      }
    }
    return "fp8";
  }
  std::string description() const override {
    switch (p_.scale) {
      case Fp8Scale::kPrompt:
        return "every token kept, keys and values FP8 E4M3 with one fp32 scale per head (the prompt's amax / 448; "
               "later tokens beyond it saturate)";
      case Fp8Scale::kCalibrated:
        return fmt::format("every token kept, keys and values FP8 E4M3 with one fp32 scale per head calibrated on {} "
                           "held-out windows ({} x amax / 448)", p_.windows, p_.margin);
      case Fp8Scale::kPage:
        return "every token kept, keys and values FP8 E4M3 with an fp32 scale per page (its amax / 448) behind an "
               "fp16 residual of one page";
    }
    return {};
  }
  std::vector<KvTier> tiers() const override {
    const KvTier fp8{fp8_e4m3_format(), fp8_e4m3_format()};
    if (p_.scale == Fp8Scale::kPage) return {KvTier{fp16_format(), fp16_format()}, fp8};
    return {fp8};
  }
  Fp8Scale fp8_scale() const override { return p_.scale; }
  float fp8_fixed_scale(std::int32_t layer, std::int32_t head, int part) const override {
    const std::vector<double>& s = part == 0 ? p_.k_scales : p_.v_scales;
    const auto i = static_cast<std::size_t>(layer * kv_heads_ + head);
    if (p_.scale != Fp8Scale::kCalibrated || i >= s.size()) {
      throw std::logic_error(fmt::format("fp8 policy {}: no calibrated scale for layer {} head {}", name(), layer, head));
    }
    return static_cast<float>(s[i]);
  }
  void bind_engine(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim,
                   std::int64_t page_bytes) override {
    kv_heads_ = kv_heads;
    if (p_.scale == Fp8Scale::kPage) {
      page_tokens_ = tokens_per_page(tiers()[1], head_dim, page_bytes);
    } else if (p_.scale == Fp8Scale::kCalibrated) {
      if (p_.k_scales.empty() && p_.v_scales.empty()) {
        throw InputError(fmt::format("policy '{}': scale=calibrated needs its scales: kvcheck verify and kvcheck report "
                                     "calibrate them on held-out windows; elsewhere give k_scales=S/S/... and "
                                     "v_scales=S/S/... (one per layer and kv head, layer major)", name()));
      }
      for (const auto* key : {"k_scales", "v_scales"}) {
        const std::vector<double>& s = key[0] == 'k' ? p_.k_scales : p_.v_scales;
        if (static_cast<std::int64_t>(s.size()) != layers * kv_heads) {
          throw InputError(fmt::format("policy '{}': parameter '{}' has {} scales; the model has {} layers x {} kv "
                                       "heads = {}", name(), key, s.size(), layers, kv_heads, layers * kv_heads));
        }
      }
    }
  }

  // scale=page: the residual is one page of the FP8 tier.
  std::int64_t residual_tokens() const override { return p_.scale == Fp8Scale::kPage ? page_tokens() : 0; }
  PromptSelection select_prompt_tiers(std::int32_t, std::int64_t n, const PromptScores&) const override {
    // scale=page (the only mode that selects): whole pages encoded, the rest in the residual.
    const std::int64_t encoded = p_.scale == Fp8Scale::kPage ? n / page_tokens() * page_tokens() : 0;
    PromptSelection s;
    for (std::int64_t i = 0; i < n; ++i) (i < encoded ? s.low : s.high).push_back(static_cast<std::int32_t>(i));
    return s;
  }
  StepDecision decide_step(std::int32_t, std::span<const LiveToken> live, std::int32_t) const override {
    StepDecision d;
    if (p_.scale == Fp8Scale::kPage) {
      d.flush = std::count_if(live.begin(), live.end(), [](const LiveToken& t) { return t.tier == 0; }) >=
                page_tokens();
    }
    return d;
  }

 private:
  std::int64_t page_tokens() const {
    if (page_tokens_ <= 0) throw std::logic_error("fp8:scale=page: the page size is set by bind_engine (make_engine)");
    return page_tokens_;
  }
  Fp8Params p_;
  std::int64_t kv_heads_ = 0;
  std::int64_t page_tokens_ = 0;
};

}  // namespace

std::unique_ptr<KvPolicy> make_fp8_policy(const Fp8Params& params) { return std::make_unique<Fp8Policy>(params); }

std::optional<Fp8Params> fp8_params_of(const KvPolicy& policy) {
  const auto* p = dynamic_cast<const Fp8Policy*>(&policy);
  return p ? std::optional<Fp8Params>(p->params()) : std::nullopt;
}


PolicyEntry fp8_policy_entry() {
  constexpr double kFloatMin = 1.17549435e-38;  // the smallest normal float: a scale is at least that
  return {"fp8", "every token kept, keys and values FP8 E4M3 with fp32 scales (optimized/fp8_policy.h)",
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
          [](const PolicyParams& p) {
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
          }};
}

}  // namespace kvcheck
