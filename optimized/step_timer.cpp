#include "optimized/step_timer.h"

namespace kvcheck {

const char* step_part_name(StepPart part) {
  switch (part) {
    case StepPart::kStep: return "step";
    case StepPart::kPrefill: return "prefill";
    case StepPart::kDecode: return "decode";
    case StepPart::kProjections: return "projections";
    case StepPart::kAttention: return "attention";
    case StepPart::kKvWrite: return "kv write";
    case StepPart::kPolicy: return "policy";
    case StepPart::kPageManager: return "page manager";
  }
  return "?";
}

void reset_step_times() {
  for (auto& ns : detail::step_nanoseconds) ns.store(0, std::memory_order_relaxed);
}

StepTimes step_times() {
  StepTimes t;
  for (std::size_t i = 0; i < t.seconds.size(); ++i) {
    t.seconds[i] = static_cast<double>(detail::step_nanoseconds[i].load(std::memory_order_relaxed)) * 1e-9;
  }
  return t;
}

}  // namespace kvcheck
