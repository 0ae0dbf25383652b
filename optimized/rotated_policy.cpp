#include "optimized/rotated_policy.h"

#include <fmt/format.h>

#include <utility>

#include "kernels/cpu/hadamard_rotate.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

// Every decision is inner's; only the rotation (and the name saying so) is added.
class RotatedPolicy final : public KvPolicy {
 public:
  RotatedPolicy(std::unique_ptr<KvPolicy> inner, KvRotation rotation)
      : inner_(std::move(inner)), rotation_(rotation) {}
  std::string name() const override {
    const std::string base = inner_->name();
    const std::string params = rotation_.signs ? fmt::format("rotate=hadamard-signs,rotate_seed={}", rotation_.seed)
                                               : std::string("rotate=hadamard");
    return base + (base.find(':') == std::string::npos ? ":" : ",") + params;
  }
  std::string description() const override {
    return inner_->description() + (rotation_.signs ? "; rotated by a randomised Walsh-Hadamard matrix first"
                                                    : "; rotated by the Walsh-Hadamard matrix first");
  }
  std::vector<KvTier> tiers() const override { return inner_->tiers(); }
  bool evicts() const override { return inner_->evicts(); }
  std::int64_t residual_tokens() const override { return inner_->residual_tokens(); }
  std::int64_t observation_window() const override { return inner_->observation_window(); }
  std::vector<std::int32_t> select_prompt(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    return inner_->select_prompt(layer, n, s);
  }
  PromptSelection select_prompt_tiers(std::int32_t layer, std::int64_t n, const PromptScores& s) const override {
    return inner_->select_prompt_tiers(layer, n, s);
  }
  std::vector<PromptSelection> select_prompt_all(std::int64_t n, std::int64_t kv_heads,
                                                 std::span<const PromptScores> heads) const override {
    return inner_->select_prompt_all(n, kv_heads, heads);
  }
  SlotStrategy slot_strategy() const override { return inner_->slot_strategy(); }
  bool accumulates_scores() const override { return inner_->accumulates_scores(); }
  StepDecision decide_step(std::int32_t layer, std::span<const LiveToken> live, std::int32_t p) const override {
    return inner_->decide_step(layer, live, p);
  }
  std::optional<std::size_t> select_victim(std::int32_t layer, std::span<const LiveToken> live,
                                           std::int32_t p) const override {
    return inner_->select_victim(layer, live, p);
  }
  KvRotation rotation() const override { return rotation_; }
  Fp8Scale fp8_scale() const override { return inner_->fp8_scale(); }
  float fp8_fixed_scale(std::int32_t layer, std::int32_t head, int part) const override {
    return inner_->fp8_fixed_scale(layer, head, part);
  }
  void bind_engine(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t page_bytes) override {
    if (!hadamard_fits(head_dim)) {
      throw InputError(fmt::format("policy '{}': the Walsh-Hadamard rotation needs head_dim a power of two; the "
                                   "model's head_dim is {}",
                                   name(), head_dim));
    }
    inner_->bind_engine(layers, kv_heads, head_dim, page_bytes);
  }

 private:
  std::unique_ptr<KvPolicy> inner_;
  KvRotation rotation_;
};

}  // namespace

std::unique_ptr<KvPolicy> make_rotated_policy(std::unique_ptr<KvPolicy> inner, KvRotation rotation) {
  if (!rotation.hadamard) return inner;
  return std::make_unique<RotatedPolicy>(std::move(inner), rotation);
}

std::vector<PolicyParam> with_rotation_params(std::vector<PolicyParam> params) {
  params.push_back({"rotate", 0, 0, 2, true,
                    "rotate every head's queries, keys and values before quantization (hadamard-signs: a seeded "
                    "±1 diagonal first)",
                    false, {"none", "hadamard", "hadamard-signs"}});
  params.push_back({"rotate_seed", 0, 0, 1e15, true, "seed of hadamard-signs' ±1 diagonal"});
  return params;
}

std::unique_ptr<KvPolicy> rotated_from_params(std::unique_ptr<KvPolicy> inner, const PolicyParams& p) {
  const std::int64_t kind = p.integer("rotate");
  p.require(kind == 2 || p.integer("rotate_seed") == 0, "rotate_seed needs rotate=hadamard-signs");
  KvRotation r;
  r.hadamard = kind > 0;
  r.signs = kind == 2;
  r.seed = static_cast<std::uint64_t>(p.integer("rotate_seed"));
  return make_rotated_policy(std::move(inner), r);
}

}  // namespace kvcheck
