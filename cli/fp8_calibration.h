// fp8:scale=calibrated: each head's FP8 scales for keys and values, measured once before any
// request, as vLLM serves checkpoints whose k_scale / v_scale llm-compressor calibrated.
//
// The calibration windows are `windows` held-out windows (the spec's parameter, 8 by default):
// those that come after the --prompts windows a --feed text verify (or --sweep, or report) with
// the same --prompts, --prompt-tokens and --max-new-tokens evaluates, so the scales are not fitted
// on the text they are then measured on (as --xkv-calibrate samples). Each whole window (prompt
// and continuation) runs through the reference; a head's key scale is margin * the amax of its
// post-RoPE keys over every window / 448 (at least the smallest normal float), its value scale
// likewise.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "optimized/kv_policy.h"
#include "reference/model.h"

namespace kvcheck::cli {

struct Fp8Calibration {
  std::vector<std::string> sources;        // the calibration windows
  std::vector<double> k_scales, v_scales;  // [layer * kv_heads + head]
  std::string spec;                        // the policy spec with the scales spelled out
};

// Whether `spec` is fp8:scale=calibrated without its scales (and so needs calibrate_fp8).
bool needs_fp8_calibration(const std::string& spec);
// The scales of `spec` (an fp8:scale=calibrated spec) on the model at `dir`. InputError when the
// held-out set has too few windows.
Fp8Calibration calibrate_fp8(const ReferenceModel& model, const std::filesystem::path& dir, const VerifyArgs& args,
                             const std::string& spec);
// `spec` itself, or, when it needs calibration, the calibrated spec (a line on stderr says so).
std::string resolve_fp8_calibration(const ReferenceModel& model, const std::filesystem::path& dir,
                                    const VerifyArgs& args, const std::string& spec);

// Saturation of FP8 keys and values over a run (PagedKvCache::fp8_saturated): whether the policy
// stores FP8 at all (only then do verify and report show the count), and the warning printed when
// elements saturated.
bool stores_fp8(const KvPolicy& policy);
std::string fp8_saturation_warning(const KvPolicy& policy, std::int64_t saturated, std::int64_t stored);

}  // namespace kvcheck::cli
