#include "cli/fp8_calibration.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/verify_prompts.h"
#include "kernels/quant_math.h"
#include "optimized/fp8_policy.h"

namespace kvcheck::cli {
namespace {

// The amax of every (layer, kv head)'s post-RoPE keys and values over the tokens it sees.
class AmaxRecorder final : public AttentionRecorder {
 public:
  explicit AmaxRecorder(const ModelConfig& c)
      : kv_heads_(c.num_key_value_heads), d_(c.head_dim),
        k_(static_cast<std::size_t>(c.num_hidden_layers * c.num_key_value_heads), 0.0),
        v_(k_.size(), 0.0) {}
  void on_qkv(std::int64_t layer, std::int64_t, const MatrixRMd&, const MatrixRMd& k, const MatrixRMd& v) override {
    for (std::int64_t h = 0; h < kv_heads_; ++h) {
      const auto i = static_cast<std::size_t>(layer * kv_heads_ + h);
      k_[i] = std::max(k_[i], k.middleCols(h * d_, d_).cwiseAbs().maxCoeff());
      v_[i] = std::max(v_[i], v.middleCols(h * d_, d_).cwiseAbs().maxCoeff());
    }
  }
  const std::vector<double>& keys() const { return k_; }
  const std::vector<double>& values() const { return v_; }

 private:
  std::int64_t kv_heads_, d_;
  std::vector<double> k_, v_;  // [layer * kv_heads + head]
};

// margin * amax / 448 as the float the engine stores, at least the smallest normal float.
double scale_of(double amax, double margin) {
  const auto s = static_cast<float>(margin * amax / static_cast<double>(quant::kE4M3Max));
  return std::max(s, std::numeric_limits<float>::min());
}

}  // namespace

bool needs_fp8_calibration(const std::string& spec) {
  if (spec.rfind("fp8:", 0) != 0) return false;
  const std::optional<Fp8Params> p = fp8_params_of(*make_policy(spec));
  return p && p->scale == Fp8Scale::kCalibrated && p->k_scales.empty();
}

Fp8Calibration calibrate_fp8(const ReferenceModel& model, const std::filesystem::path& dir, const VerifyArgs& args,
                             const std::string& spec) {
  const std::optional<Fp8Params> params = fp8_params_of(*make_policy(spec));
  if (!params || params->scale != Fp8Scale::kCalibrated) {
    throw std::invalid_argument(fmt::format("calibrate_fp8: '{}' is not fp8:scale=calibrated", spec));
  }
  const std::vector<Prompt> windows = calibration_windows(args, dir, model.config(), params->windows);
  AmaxRecorder amax(model.config());
  Fp8Calibration out;
  for (const Prompt& w : windows) {
    model.forward(w.tokens, &amax);
    out.sources.push_back(w.source);
  }
  Fp8Params fixed = *params;
  for (const double a : amax.keys()) fixed.k_scales.push_back(scale_of(a, params->margin));
  for (const double a : amax.values()) fixed.v_scales.push_back(scale_of(a, params->margin));
  out.k_scales = fixed.k_scales;
  out.v_scales = fixed.v_scales;
  // Nine significant digits: the float each scale is survives the round trip through the spec.
  auto list = [](const std::vector<double>& s) {
    std::vector<std::string> parts;
    for (const double x : s) parts.push_back(fmt::format("{:.9g}", x));
    return fmt::format("{}", fmt::join(parts, "/"));
  };
  out.spec = fmt::format("{},k_scales={},v_scales={}", spec, list(out.k_scales), list(out.v_scales));
  return out;
}

std::string resolve_fp8_calibration(const ReferenceModel& model, const std::filesystem::path& dir,
                                    const VerifyArgs& args, const std::string& spec) {
  if (!needs_fp8_calibration(spec)) return spec;
  const Fp8Calibration cal = calibrate_fp8(model, dir, args, spec);
  fmt::print(stderr, "{}: scales calibrated on {} held-out windows after the first {} ({} to {})\n",
             make_policy(spec)->name(), cal.sources.size(), args.prompts,
             cal.sources.empty() ? std::string("none") : cal.sources.front(),
             cal.sources.empty() ? std::string("none") : cal.sources.back());
  return cal.spec;
}

bool stores_fp8(const KvPolicy& policy) {
  for (const KvTier& t : policy.tiers()) {
    if (t.key.dtype == KvDType::kFp8E4M3 || t.value.dtype == KvDType::kFp8E4M3) return true;
  }
  return false;
}

std::string fp8_saturation_warning(const KvPolicy& policy, std::int64_t saturated, std::int64_t stored) {
  const std::string why = policy.fp8_scale() == Fp8Scale::kCalibrated
                              ? "the calibration windows' amax sets that scale; a larger margin leaves more room"
                              : "the prompt's amax sets that scale, so a short prompt saturates what follows; "
                                "fp8:scale=page or fp8:scale=calibrated avoid it";
  return fmt::format("{}: {} of {} FP8 key/value elements saturated (beyond 448 x their head's scale, clamped): {}",
                     policy.name(), saturated, stored, why);
}

}  // namespace kvcheck::cli
