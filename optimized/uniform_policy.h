// Uniform policies: every token kept, stored at one tier for its whole life. full-fp32 (the exact
// configuration, which must reproduce the reference), full-fp16 (vLLM's default cache), the
// per-token integer baselines int8 and int4, and kv-bits (keys and values per-token INT at their
// own bit widths). FP8 (optimized/fp8_policy.h) is uniform too, with scales of its own.
#pragma once

#include <memory>
#include <string>

#include "optimized/kv_policy.h"

namespace kvcheck {

// Every token at `tier`, never evicted.
std::unique_ptr<KvPolicy> make_uniform_policy(std::string name, std::string description, KvTier tier);

// Their registry entries (optimized/policy_registry.h).
PolicyEntry full_fp32_policy_entry();
PolicyEntry full_fp16_policy_entry();
PolicyEntry int_policy_entry(int bits);  // int8, int4
PolicyEntry kv_bits_policy_entry();

}  // namespace kvcheck
