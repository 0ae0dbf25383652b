// Compression policies: one interface, one registry (DESIGN.md, "Compression policies").
//
// This first set stores every token at one precision for its whole life: full-fp32 (the exact
// configuration, which must reproduce the reference), full-fp16 (vLLM's default cache), and the
// per-token integer baselines int8 and int4. The eviction and mixed-precision policies of the
// policies issue extend the interface with prefill plans and per-step decisions.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/kv_bytes.h"

namespace kvcheck {

class KvPolicy {
 public:
  virtual ~KvPolicy() = default;
  virtual std::string name() const = 0;
  // One line for `--help` and reports.
  virtual std::string description() const = 0;
  // The page tiers the policy stores tokens in; tier 0 is where new tokens go.
  virtual std::vector<KvTier> tiers() const = 0;
};

// Registered policy names, in registration order.
std::vector<std::string> policy_names();
// InputError naming the policy and listing the known ones when `name` is not registered.
std::unique_ptr<KvPolicy> make_policy(const std::string& name);

}  // namespace kvcheck
