// How a policy is registered: the entry it defines beside itself (its name, its parameters with
// their defaults and ranges, how a spec builds it, its spec at a budget), read by
// optimized/policy_registry.cpp's list and, through it, by make_policy, policy_names,
// policy_help and policy_spec_at_budget (optimized/kv_policy.h). docs/developer/adding-a-policy.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "optimized/kv_policy.h"

namespace kvcheck {

// The most tokens a token-count parameter accepts.
constexpr double kMaxPolicyTokens = 1 << 20;

// One `key=value` parameter of a policy spec.
struct PolicyParam {
  std::string key;
  double value;     // the default (a list's default is empty)
  double min, max;  // of the value, or of every entry of a list
  bool integer;
  std::string help;
  bool list = false;                      // a list of numbers separated by '/' (',' separates the parameters)
  std::vector<std::string> choices = {};  // a named choice: the value is the index of the name given
};

// The parameters of one spec, defaults overridden by its `key=value` pairs; InputError naming the
// policy and the parameter for an unknown key or a bad, out-of-range value.
class PolicyParams {
 public:
  PolicyParams(const std::string& policy, const std::vector<PolicyParam>& declared, const std::string& assignments);
  double operator[](const std::string& key) const { return values_.at(key); }
  std::int64_t integer(const std::string& key) const { return static_cast<std::int64_t>(values_.at(key)); }
  // A list parameter's entries (empty when the spec does not set it).
  std::vector<std::int64_t> integers(const std::string& key) const;
  std::vector<double> numbers(const std::string& key) const;
  // InputError naming the policy unless `ok`.
  void require(bool ok, const std::string& what) const;

 private:
  std::string policy_;
  std::map<std::string, double> values_;
  std::map<std::string, std::vector<double>> lists_;
};

// A registered policy.
struct PolicyEntry {
  std::string name;
  std::string description;  // one line for --list-policies and reports
  std::vector<PolicyParam> params;
  std::function<std::unique_ptr<KvPolicy>(const PolicyParams&)> make;
  // The spec holding about `budget` tokens per head (policy_spec_at_budget); empty: the policy
  // keeps every token.
  std::function<std::string(std::int64_t budget)> at_budget = {};
};

}  // namespace kvcheck
