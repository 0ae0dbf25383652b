#include "cli/xkv_calibration.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli/engine_options.h"
#include "cli/json_file.h"
#include "cli/verify_prompts.h"
#include "optimized/engine.h"
#include "optimized/xkv_policy.h"
#include "reference/errors.h"

namespace kvcheck::cli {

XkvCalibration calibrate_xkv(const ReferenceModel& model, const std::filesystem::path& dir, const VerifyArgs& args,
                             const std::string& spec) {
  const ModelConfig& c = model.config();
  std::optional<XkvParams> params = xkv_params_of(*make_policy(spec));
  if (!params || !params->layers.empty() || params->retention > 0) {
    throw input_error("--xkv-calibrate", "policy",
                      "needs an xkv spec with a budget (per-request allocation), e.g. xkv:budget=64; got '{}'", spec);
  }
  if (args.prompt_tokens < params->budget) {
    throw input_error("--xkv-calibrate", "--prompt-tokens",
                      "{} prompt tokens hold fewer than the budget of {} tokens per head ({}): every sampled "
                      "request must be able to take the whole total",
                      args.prompt_tokens, params->budget, spec);
  }
  const std::vector<Prompt> prompts = calibration_windows(args, dir, c, args.xkv_calibrate);

  std::vector<std::vector<std::vector<double>>> samples;
  params->on_layer_scores = [&](const std::vector<std::vector<double>>& s) { samples.push_back(s); };
  std::unique_ptr<Engine> engine =
      make_engine(model, single_request_engine_options(args, spec), make_xkv_policy(*params));
  XkvCalibration out;
  out.from_spec = engine->policy->name();
  const std::int64_t total = c.num_hidden_layers * (params->budget - params->window);
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    EngineGenerateOptions eg;
    eg.max_new_tokens = 1;  // the prefill; its selection records the scores
    eg.stop_at_eos = false;
    const std::span<const std::int32_t> prompt(prompts[p].tokens);
    engine_generate(*engine, static_cast<std::int64_t>(p), prompt.first(static_cast<std::size_t>(args.prompt_tokens)),
                    eg);
    out.sources.push_back(prompts[p].source);
    out.per_request.push_back(xkv_allocate(samples.back(), total));
  }
  out.layers = xkv_average_allocation(samples, total);
  XkvParams fixed = *params;
  fixed.layers = out.layers;
  fixed.on_layer_scores = nullptr;
  out.spec = make_xkv_policy(fixed)->name();
  return out;
}

int run_xkv_calibrate(const VerifyArgs& args) {
  const std::filesystem::path dir =
      args.model.empty() ? datasets_dir() / "models" / "kvcheck-tiny" : std::filesystem::path(args.model);
  const ReferenceModel model = ReferenceModel::load(dir);
  const XkvCalibration cal = calibrate_xkv(model, dir, args, args.policy);
  fmt::print("xkv calibration of {} on {} prompts of {} tokens (held-out windows after the first {}):\n",
             cal.from_spec, cal.sources.size(), args.prompt_tokens, args.prompts);
  for (std::size_t s = 0; s < cal.sources.size(); ++s) {
    fmt::print("  {:<40} {}\n", cal.sources[s], fmt::join(cal.per_request[s], "/"));
  }
  fmt::print("averaged per-layer budgets (largest remainder): {}\n", fmt::join(cal.layers, "/"));
  fmt::print("policy spec: {}\n", cal.spec);
  if (!args.json.empty()) {
    nlohmann::json per_request = nlohmann::json::array();
    for (std::size_t s = 0; s < cal.sources.size(); ++s) {
      per_request.push_back({{"source", cal.sources[s]}, {"layers", cal.per_request[s]}});
    }
    write_json_atomically(args.json,
                          {{"format", "kvcheck-xkv-calibration"},
                           {"version", 1},
                           {"model", dir.string()},
                           {"from_spec", cal.from_spec},
                           {"prompt_tokens", args.prompt_tokens},
                           {"samples", per_request},
                           {"layers", cal.layers},
                           {"spec", cal.spec}},
                          "--json");
  }
  return 0;
}

}  // namespace kvcheck::cli
