// Compression policies: one interface, one registry (docs/design.md §8).
//
// Uniform policies (optimized/uniform_policy.h) store every token at one precision for its whole
// life: full-fp32 (the exact configuration, which must reproduce the reference), full-fp16 (vLLM's
// default cache), fp8 (E4M3 with one scale per head) and the per-token integer baselines int8 and
// int4. Residual
// policies (optimized/kivi_policy.h: kivi2, kivi4, minikv) quantize keys per channel in groups of
// tokens behind an fp16 residual. Eviction policies (optimized/eviction_policies.h:
// streaming, h2o, snapkv, pyramidkv) also choose, per (request, layer, kv-head), which prompt tokens to keep
// after prefill and which token to drop before a decode step adds one.
//
// The quantizing policies (int8, int4, kv-bits, kivi2, kivi4, leankv) take `rotate=hadamard`
// (optimized/rotated_policy.h): every head's queries, keys and values rotated by one normalised
// Walsh–Hadamard matrix before the cache stores them, the attention output rotated back.
//
// The fp8 policy (optimized/fp8_policy.h) takes its scale as a parameter: the prompt's amax, a
// calibrated per-head scale, or a scale per page behind an fp16 residual of one page.
//
// A policy is named `name` or `name:key=value,key=value` (e.g. `h2o:budget=64,recent=0.25`);
// `policy_names()` lists the names, `policy_help()` their parameters and defaults. The registry
// (optimized/policy_registry.cpp) lists every policy, one line each, its entry (name, parameters,
// constructor) defined beside the policy; docs/developer/adding-a-policy.md.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/kv_bytes.h"
#include "optimized/step_decision.h"

namespace kvcheck {

struct PolicyEntry;  // optimized/policy_registry.h

// One kv-head's attention statistics from prefill (kernels/cpu/prefill_attention.h's column sums,
// the maximum over the query heads of the group, as LeanKV aggregates GQA): for every prompt
// position, the attention it received from all queries, and from the last `window` queries.
struct PromptScores {
  std::span<const float> all;     // [prompt_len]
  std::span<const float> window;  // [prompt_len] (empty when the policy asked for no window)
  std::int32_t num_layers = 1;    // the model's, for per-layer budgets
};

// A live token of a head: its position and its score (the attention it has accumulated, for
// the policies that accumulate; 0 otherwise).
struct LiveToken {
  std::int32_t position = 0;
  float score = 0.0f;
  int tier = 0;  // 0: high (where new tokens go), 1: low
};

// A head's prompt tokens after prefill: the positions kept in each tier (ascending, disjoint);
// the others are dropped.
struct PromptSelection {
  std::vector<std::int32_t> high, low;
};

// Where an FP8 tier's scales come from (the fp8 policy's `scale` parameter).
enum class Fp8Scale {
  kPrompt,      // one per (layer, kv head, keys/values): the prompt's amax / 448; later tokens beyond it saturate
  kCalibrated,  // one per (layer, kv head, keys/values), fixed before any request (fp8_fixed_scale)
  kPage,        // one per page: the low tier's pages are encoded whole, each with its own amax / 448
};

// The orthonormal rotation a policy applies to every head's vectors (kernels/cpu/hadamard_rotate.h):
// none, the normalised Walsh–Hadamard matrix H/√d, or H·D/√d with D a ±1 diagonal drawn from
// `seed` (the randomised Hadamard of QuaRot / TurboQuant).
struct KvRotation {
  bool hadamard = false;
  bool signs = false;
  std::uint64_t seed = 0;
};

// Which vectors of a head the runner hands to KvPolicy::rotate.
enum class RotatedPart {
  kQuery,   // post-RoPE queries: R
  kKey,     // post-RoPE keys, before the cache stores them: R
  kValue,   // values, before the cache stores them: R
  kOutput,  // the attention output, back to the model's space: R^T
};

// Applies `rotation` to rows [n][head_dim] of one part, in place: what KvPolicy::rotate does by
// default (a no-op without a rotation).
void rotate_rows(const KvRotation& rotation, RotatedPart part, std::span<float> rows, std::int64_t head_dim);

class KvPolicy {
 public:
  virtual ~KvPolicy() = default;
  virtual std::string name() const = 0;
  // One line for `--help` and reports.
  virtual std::string description() const = 0;
  // The page tiers the policy stores tokens in; tier 0 is where new tokens go.
  virtual std::vector<KvTier> tiers() const = 0;

  // --- eviction (the defaults keep every token) ---
  // Whether the policy ever drops a token (prefill or decode).
  virtual bool evicts() const { return false; }
  // KIVI's fp16 residual: when > 0, tier 0 is an fp16 buffer of at most this many tokens, moved
  // to tier 1 (quantized in whole groups, append-only) by a flush once it is full.
  virtual std::int64_t residual_tokens() const { return 0; }
  // Whether the prompt is split between the tiers (or dropped) after prefill (select_prompt_all),
  // and whether decode steps ask decide_step.
  bool selects_prompt() const { return evicts() || residual_tokens() > 0; }
  // Whether a request's heads hold their tokens packed in position order in one tier, so that a
  // swap can copy them out and back byte for byte.
  bool swappable() const { return !evicts() && tiers().size() == 1; }
  // Whether the pages of a prompt's first n tokens are a function of those n tokens alone: the
  // same bytes whether the prefix was stored alone or inside any longer prompt. Only such a
  // policy may reuse a cached prefix's pages (the scheduler's prefix cache) or share pages at
  // all. The default derives it from the formats: every token kept, in one tier, each token's
  // codes and metadata from its own rows (fp32, fp16, INT per token or per channel group of a
  // token, FP8 with a calibrated scale; a Quest page's key range is its own tokens'). Not
  // closed: evicting and tier-splitting policies (they choose from the whole prompt), KIVI's
  // per-channel key groups, FP8 with the prompt's amax as the scale. A policy may override it;
  // properties/optimized/prefix_closed_props.cpp holds each declaration to the bytes.
  virtual bool prefix_closed() const;
  // Queries at the end of the prompt whose column sums PromptScores::window holds (0: none).
  virtual std::int64_t observation_window() const { return 0; }
  // The prompt positions a head of `layer` keeps, ascending, from its prefill scores.
  virtual std::vector<std::int32_t> select_prompt(std::int32_t layer, std::int64_t prompt_len,
                                                  const PromptScores& scores) const;
  // Mixed-precision policies split the prompt between the tiers; the default keeps
  // select_prompt's positions at high.
  virtual PromptSelection select_prompt_tiers(std::int32_t layer, std::int64_t prompt_len,
                                              const PromptScores& scores) const;
  // Every head's prompt selection at once, from every head's scores (layer-major, kv-head minor):
  // policies that weigh the layers against each other (XKV) override it; the default applies
  // select_prompt_tiers head by head.
  virtual std::vector<PromptSelection> select_prompt_all(std::int64_t prompt_len, std::int64_t kv_heads,
                                                         std::span<const PromptScores> heads) const;
  // What the cache does with the slot an eviction frees (SpvLLM's strategies; LeanKV's unified
  // pages reuse it).
  virtual SlotStrategy slot_strategy() const { return SlotStrategy::kSlotReuse; }
  // Whether decode attention probabilities add to the live tokens' scores (the maximum over the
  // group's query heads, as at prefill).
  virtual bool accumulates_scores() const { return false; }
  // A decode step's decision for a head; the default evicts select_victim's choice.
  virtual StepDecision decide_step(std::int32_t layer, std::span<const LiveToken> live,
                                   std::int32_t new_position) const;
  // decide_step for kv head `kv_head` of `layer`, the one the model runner asks: a policy whose
  // heads follow different rules (DuoAttention's retrieval and streaming heads) overrides it; the
  // default asks decide_step, which does not depend on the head.
  virtual StepDecision decide_head_step(std::int32_t layer, std::int32_t kv_head, std::span<const LiveToken> live,
                                        std::int32_t new_position) const;
  // Before a decode step appends the token at `new_position` to a head of `layer` that holds
  // `live` (in walk order): the index in `live` of the token to drop, or nullopt to keep them all.
  virtual std::optional<std::size_t> select_victim(std::int32_t layer, std::span<const LiveToken> live,
                                                   std::int32_t new_position) const;

  // --- rotation before quantization (the defaults: none) ---
  virtual KvRotation rotation() const { return {}; }
  // Applies rotation() to rows [n][head_dim] of one part, in place (the runner calls it for
  // every head of a layer at once; a no-op without a rotation).
  virtual void rotate(RotatedPart part, std::span<float> rows, std::int64_t head_dim) const;

  // --- query-aware page selection (the defaults: every page read) ---
  // The page metadata a selection reads is the tiers' (KvTier::key_range: the fp16 per-channel
  // min and max of each page's keys, in the page).
  // The pages a decode step of a head reads besides the one being written (Quest's K), or 0: every
  // page. Whether a decode step reads only the pages select_pages chooses.
  virtual std::int64_t selected_pages() const { return 0; }
  bool selects_pages() const { return selected_pages() > 0; }
  // The pages a decode step of one kv head reads, ascending indices into its pages in walk
  // order, from its group's queries q [group][head_dim] and each page's per-channel key min and
  // max ([pages][head_dim] each); `written` is the page the step's token went to. The default:
  // every page.
  virtual std::vector<std::size_t> select_pages(std::span<const float> q, std::int64_t group, std::int64_t head_dim,
                                                std::span<const float> key_min, std::span<const float> key_max,
                                                std::size_t written) const;

  // --- FP8 scales (the defaults: the prompt's amax, as every policy without FP8 ignores) ---
  virtual Fp8Scale fp8_scale() const { return Fp8Scale::kPrompt; }
  // kCalibrated: the scale of keys (part 0) or values (part 1) of a head.
  virtual float fp8_fixed_scale(std::int32_t /*layer*/, std::int32_t /*head*/, int /*part*/) const { return 0.0f; }
  // Called by make_engine before a cache is built on the policy, with the model's shape and the
  // page size: a policy whose residual is one page learns its size here; InputError when the
  // policy cannot run on that model (calibrated scales of another shape, or none).
  virtual void bind_engine(std::int64_t /*layers*/, std::int64_t /*kv_heads*/, std::int64_t /*head_dim*/,
                           std::int64_t /*page_bytes*/) {}
};

// The registry (optimized/policy_registry.cpp).
// Registered policy names, in registration order.
std::vector<std::string> policy_names();
// One line per policy: name, parameters with their defaults, description.
std::vector<std::string> policy_help();
// The spec of policy `name` holding about `budget` tokens per head (its budget parameter set,
// the others at their defaults, adjusted where a default would not fit the budget), or nullopt
// for a policy that keeps every token (`name` may then be a whole spec, e.g. fp8:scale=page).
// InputError for an unknown name, or parameters given to a policy with a budget.
std::optional<std::string> policy_spec_at_budget(const std::string& name, std::int64_t budget);
// Builds `spec` (`name` or `name:key=value,...`). InputError naming the policy (unknown name,
// listing the known ones) or the parameter (unknown key, bad or out-of-range value).
std::unique_ptr<KvPolicy> make_policy(const std::string& spec);
// "int8,kv-bits:k=4,v=8,h2o" -> {"int8", "kv-bits:k=4,v=8", "h2o"}: a comma-separated segment
// that has '=' but no ':' continues the previous policy's parameters; blanks around names go.
// How every command that takes a comma-separated policy list reads it.
std::vector<std::string> split_policy_list(const std::string& list);

}  // namespace kvcheck
