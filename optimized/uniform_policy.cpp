#include "optimized/uniform_policy.h"

#include <fmt/format.h>

#include <utility>

#include "optimized/policy_registry.h"
#include "optimized/rotated_policy.h"

namespace kvcheck {
namespace {

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

PolicyEntry uniform_entry(const std::string& name, const std::string& description, KvTier tier) {
  return {name, description, {}, [=](const PolicyParams&) { return make_uniform_policy(name, description, tier); }};
}

}  // namespace

std::unique_ptr<KvPolicy> make_uniform_policy(std::string name, std::string description, KvTier tier) {
  return std::make_unique<UniformPolicy>(std::move(name), std::move(description), tier);
}

PolicyEntry full_fp32_policy_entry() {
  return uniform_entry("full-fp32", "every token kept, keys and values in fp32 (must reproduce the reference)",
                       {fp32_format(), fp32_format()});
}

PolicyEntry full_fp16_policy_entry() {
  return uniform_entry("full-fp16", "every token kept, keys and values in fp16 (vLLM's default cache)",
                       {fp16_format(), fp16_format()});
}

PolicyEntry int_policy_entry(int bits) {
  const std::string name = fmt::format("int{}", bits);
  const std::string description =
      fmt::format("every token kept, keys and values int{} per token (fp16 scale and zero)", bits);
  const KvTier tier{int_format(per_token(bits)), int_format(per_token(bits))};
  return {name, description, with_rotation_params({}), [=](const PolicyParams& p) {
            return rotated_from_params(make_uniform_policy(name, description, tier), p);
          }};
}

PolicyEntry kv_bits_policy_entry() {
  return {"kv-bits", "every token kept, keys and values per-token INT at their own bit widths (16: fp16)",
          with_rotation_params({{"k", 8, 2, 16, true, "key bits (2, 4, 8, 16)"},
                                {"v", 4, 2, 16, true, "value bits (2, 4, 8, 16)"}}),
          [](const PolicyParams& p) {
            auto format = [&](const char* key) {
              const std::int64_t b = p.integer(key);
              p.require(b == 2 || b == 4 || b == 8 || b == 16, fmt::format("{} must be 2, 4, 8 or 16", key));
              return b == 16 ? fp16_format() : int_format(per_token(static_cast<int>(b)));
            };
            const KvTier tier{format("k"), format("v")};
            return rotated_from_params(
                make_uniform_policy(fmt::format("kv-bits:k={},v={}", p.integer("k"), p.integer("v")),
                                    fmt::format("every token kept, {} per token", kv_tier_name(tier)), tier),
                p);
          }};
}

}  // namespace kvcheck
