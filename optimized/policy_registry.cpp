// The policy registry: every registered policy, one line each, and the functions that read the
// list (optimized/kv_policy.h: make_policy, policy_names, policy_help, policy_spec_at_budget).
// Each entry is defined beside its policy (optimized/policy_registry.h says what an entry holds).
#include "optimized/policy_registry.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>

#include "optimized/adakv_policy.h"
#include "optimized/duo_policy.h"
#include "optimized/eviction_policies.h"
#include "optimized/fp8_policy.h"
#include "optimized/kivi_policy.h"
#include "optimized/leankv_policy.h"
#include "optimized/quest_policy.h"
#include "optimized/spvllm_policy.h"
#include "optimized/uniform_policy.h"
#include "optimized/xkv_policy.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

// The registered policies, in the order policy_names() lists them (the sweep's and the report's
// row order): one line per policy, its entry defined beside it.
const std::vector<PolicyEntry>& registry() {
  static const std::vector<PolicyEntry> entries = {
      full_fp32_policy_entry(),
      full_fp16_policy_entry(),
      fp8_policy_entry(),
      int_policy_entry(8),
      int_policy_entry(4),
      kv_bits_policy_entry(),
      streaming_policy_entry(),
      h2o_policy_entry(),
      snapkv_policy_entry(),
      pyramidkv_policy_entry(),
      adakv_policy_entry(),
      xkv_policy_entry(),
      duo_policy_entry(),
      spvllm_policy_entry(),
      kivi_policy_entry(2),
      kivi_policy_entry(4),
      minikv_policy_entry(),
      leankv_policy_entry(),
      quest_policy_entry(),
  };
  return entries;
}

// One number of a spec, or InputError naming the policy and the parameter.
double parse_number(const std::string& policy, const PolicyParam& d, const std::string& text, const std::string& whole) {
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

}  // namespace

PolicyParams::PolicyParams(const std::string& policy, const std::vector<PolicyParam>& declared,
                           const std::string& assignments)
    : policy_(policy) {
  for (const PolicyParam& p : declared) values_[p.key] = p.value;
  std::size_t at = 0;
  while (at < assignments.size()) {
    const std::size_t end = std::min(assignments.find(',', at), assignments.size());
    const std::string item = assignments.substr(at, end - at);
    at = end + 1;
    const std::size_t eq = item.find('=');
    const std::string key = item.substr(0, eq);
    const auto d = std::find_if(declared.begin(), declared.end(), [&](const PolicyParam& p) { return p.key == key; });
    if (d == declared.end()) {
      std::vector<std::string> keys;
      for (const PolicyParam& p : declared) keys.push_back(p.key);
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

std::vector<std::int64_t> PolicyParams::integers(const std::string& key) const {
  std::vector<std::int64_t> out;
  if (const auto it = lists_.find(key); it != lists_.end()) {
    for (double v : it->second) out.push_back(static_cast<std::int64_t>(v));
  }
  return out;
}

std::vector<double> PolicyParams::numbers(const std::string& key) const {
  const auto it = lists_.find(key);
  return it == lists_.end() ? std::vector<double>{} : it->second;
}

void PolicyParams::require(bool ok, const std::string& what) const {
  if (!ok) throw InputError(fmt::format("policy '{}': {}", policy_, what));
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const PolicyEntry& e : registry()) names.push_back(e.name);
  return names;
}

std::vector<std::string> policy_help() {
  std::vector<std::string> lines;
  for (const PolicyEntry& e : registry()) {
    std::vector<std::string> params;
    for (const PolicyParam& p : e.params) {
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
  for (const PolicyEntry& e : registry()) {
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
  for (const PolicyEntry& e : registry()) {
    if (e.name == name) return e.make(PolicyParams(name, e.params, colon == std::string::npos ? "" : spec.substr(colon + 1)));
  }
  throw InputError(fmt::format("policy '{}': unknown; known policies: {}", name, fmt::join(policy_names(), ", ")));
}

std::vector<std::string> split_policy_list(const std::string& list) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at <= list.size()) {
    const std::size_t comma = std::min(list.find(',', at), list.size());
    std::string part = list.substr(at, comma - at);
    part.erase(0, part.find_first_not_of(' '));
    part.erase(part.find_last_not_of(' ') + 1);
    if (!part.empty()) {
      if (part.find('=') != std::string::npos && part.find(':') == std::string::npos && !out.empty()) {
        out.back() += "," + part;
      } else {
        out.push_back(part);
      }
    }
    at = comma + 1;
  }
  return out;
}

}  // namespace kvcheck
