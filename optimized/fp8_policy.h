// The fp8 policy: every token kept, keys and values FP8 E4M3, with its scales from one of three
// places (the `scale` parameter):
//
//   prompt      (the default) one fp32 scale per (layer, kv head) for keys and one for values, the
//               prompt's amax / 448, fixed when the prompt is stored: later tokens beyond
//               448 * scale saturate (PagedKvCache counts them, fp8_saturated). A one-token prompt
//               saturates most of what follows.
//   calibrated  the same per-head scales, but measured before any request, on calibration windows
//               run through the reference (cli/fp8_calibration.h: margin * amax / 448 over the
//               windows), as vLLM serves checkpoints calibrated with llm-compressor (k_scale,
//               v_scale). Given as k_scales / v_scales ([layer * kv_heads + head]); verify and
//               report calibrate a spec without them.
//   page        a scale per page: new tokens stay in an fp16 residual (tier 0) until it holds one
//               page of the FP8 tier (tier 1), which is then encoded whole with its own amax / 448
//               and never changes (KIVI's residual machinery, optimized/kivi_policy.h). Nothing
//               saturates. The prompt: its first floor(n / page) pages are encoded, the rest stays
//               in the residual.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "optimized/kv_policy.h"

namespace kvcheck {

struct Fp8Params {
  Fp8Scale scale = Fp8Scale::kPrompt;
  double margin = 1.0;                     // calibrated: scales are margin * amax / 448
  std::int64_t windows = 8;                // calibrated: held-out windows the scales are measured on
  std::vector<double> k_scales, v_scales;  // calibrated: [layer * kv_heads + head]; empty: not yet calibrated
};

std::unique_ptr<KvPolicy> make_fp8_policy(const Fp8Params& params);
// The parameters of an fp8 policy, nullopt for any other.
std::optional<Fp8Params> fp8_params_of(const KvPolicy& policy);

// Registry entry (optimized/policy_registry.h).
PolicyEntry fp8_policy_entry();

}  // namespace kvcheck
