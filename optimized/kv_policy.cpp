#include "optimized/kv_policy.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <functional>
#include <utility>

#include "reference/errors.h"

namespace kvcheck {
namespace {

// Every token at one tier, never evicted.
class UniformPolicy final : public KvPolicy {
 public:
  UniformPolicy(std::string name, std::string description, KvTier tier)
      : name_(std::move(name)), description_(std::move(description)), tier_(tier) {}
  std::string name() const override { return name_; }
  std::string description() const override { return description_; }
  std::vector<KvTier> tiers() const override { return {tier_}; }

 private:
  std::string name_;
  std::string description_;
  KvTier tier_;
};

struct Entry {
  std::string name;
  std::function<std::unique_ptr<KvPolicy>()> make;
};

const std::vector<Entry>& registry() {
  static const std::vector<Entry> entries = [] {
    std::vector<Entry> e;
    auto uniform = [&](const char* name, const char* description, KvTier tier) {
      e.push_back({name, [=] { return std::make_unique<UniformPolicy>(name, description, tier); }});
    };
    uniform("full-fp32", "every token kept, keys and values in fp32 (must reproduce the reference)",
            {fp32_format(), fp32_format()});
    uniform("full-fp16", "every token kept, keys and values in fp16 (vLLM's default cache)",
            {fp16_format(), fp16_format()});
    uniform("int8", "every token kept, keys and values int8 per token (fp16 scale and zero)",
            {int_format(per_token(8)), int_format(per_token(8))});
    uniform("int4", "every token kept, keys and values int4 per token (fp16 scale and zero)",
            {int_format(per_token(4)), int_format(per_token(4))});
    return e;
  }();
  return entries;
}

}  // namespace

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const Entry& e : registry()) names.push_back(e.name);
  return names;
}

std::unique_ptr<KvPolicy> make_policy(const std::string& name) {
  for (const Entry& e : registry()) {
    if (e.name == name) return e.make();
  }
  throw InputError(fmt::format("policy '{}': unknown; known policies: {}", name, fmt::join(policy_names(), ", ")));
}

}  // namespace kvcheck
