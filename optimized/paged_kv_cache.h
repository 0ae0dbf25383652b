// The engine's KV cache: every (request, layer, kv-head) of a model in LeanKV's unified pages,
// through the page manager (optimized/unified_page_manager.h), in the tiers of a policy.
//
// Writing tokens encodes their key and value rows into the tier's format (kernels/cpu/page_encode.h:
// INT per token, per channel group or per channel over G tokens, FP8 with the head's scale (set
// by its prompt's amax, or calibrated) or with each low-tier page's own scale (fp8:scale=page:
// a page is encoded whole); fp16 rounding to nearest even; fp32 as is) and stores the codes in the
// page's tiled layout. A residual policy (KIVI, MiniKV) holds its fp16 residual at high and
// flushes it to the low tier in whole groups; reading hands the decode kernel (kernels/cpu/paged_attention.h) the pages of a head in
// walk order, high tier first. NaN or infinite keys and values are rejected with an InputError
// naming the request, layer, head and position, before anything is stored.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <vector>

#include "kernels/cpu/page_encode.h"
#include "kernels/cpu/paged_attention.h"
#include "optimized/kv_policy.h"
#include "optimized/unified_page_manager.h"
#include "reference/config.h"

namespace kvcheck {

// The most pages a request with `tokens` tokens can hold over all its heads, whatever a policy
// storing tokens in `tiers` (one or two) decides: a two-tier policy may fill pages of both.
std::int64_t request_pages(const ModelConfig& model, std::span<const KvTier> tiers, std::int64_t page_bytes,
                           std::int64_t tokens);

struct PagedKvCacheConfig {
  std::int64_t pages = 0;
  std::int64_t page_bytes = 16 * 1024;
  bool poison = false;  // tests: free pages and dead slots hold NaN
};

class PagedKvCache {
 public:
  // The cache keeps a reference to `policy`, which must outlive it.
  PagedKvCache(const ModelConfig& model, const KvPolicy& policy, PagedKvCacheConfig config);

  const KvPolicy& policy() const { return policy_; }

  const UnifiedPageManager& manager() const { return manager_; }
  std::int64_t free_pages() const { return manager_.free_list().free_count(); }
  std::int64_t pool_pages() const { return manager_.pool().pages(); }
  // The most pages a request with `tokens` tokens can hold over all its heads, whatever its
  // policy decides (request_pages below, for this cache's policy and pages).
  std::int64_t request_pages(std::int64_t tokens) const;
  // The most free pages the prompt phase of a `tokens`-token prompt needs.
  std::int64_t prompt_pages(std::int64_t tokens) const;
  bool has(std::int64_t request) const { return manager_.has_request(request); }

  // Admits a request and allocates the pages of its `tokens` prompt tokens in every head.
  // PoolExhausted (nothing kept, the request not admitted) when the pool cannot hold them.
  void reserve_prompt(std::int64_t request, std::int64_t tokens);
  // Stores one layer of a reserved prompt: keys and values are [tokens][kv_dim], post-RoPE.
  void write_prompt_layer(std::int64_t request, std::int32_t layer, std::int64_t tokens, std::span<const float> keys,
                          std::span<const float> values);
  // The same for prompt positions first .. first + tokens - 1 of a request whose first `first`
  // positions are already stored (a prefix taken from the prefix cache): rows [tokens][kv_dim].
  void write_prompt_rows(std::int64_t request, std::int32_t layer, std::int64_t first, std::int64_t tokens,
                         std::span<const float> keys, std::span<const float> values);
  // What the cache holds for prompt positions 0 .. tokens-1 of one layer, decoded to float
  // ([tokens][kv_dim] each, kernels/cpu/page_encode.h decode_block): the keys and values a
  // prefix-reusing prefill attends over, so that a cached prefix and a computed one are the same
  // numbers. Per-token formats only (a prefix-closed policy's; logic_error otherwise).
  void read_prompt_rows(std::int64_t request, std::int32_t layer, std::int64_t tokens, std::span<float> keys,
                        std::span<float> values) const;

  // Eviction policies choose a prompt's kept tokens after its prefill; they check the pool first
  // (PoolExhausted, before any compute, when the pages of `tokens` prompt tokens are not free)...
  void check_prompt_fits(std::int64_t tokens) const;
  // ...and then admit the request with, per head (layer-major, kv-head minor), the kept prompt
  // positions of each tier and their initial scores (empty: 0), and store those tokens packed,
  // each in its tier's format. keys[layer] and values[layer] are [tokens][kv_dim], post-RoPE.
  void commit_prompt(std::int64_t request, std::int64_t tokens, std::span<const PromptSelection> kept,
                     std::span<const std::vector<float>> scores, std::span<const std::vector<float>> keys,
                     std::span<const std::vector<float>> values);

  // Reserves, in every head of every listed request, the slot of the token at positions[i].
  // `step`, when not empty, gives per head (request-major, then layer, then kv head) the policy's
  // decision (indices into the head's live_tokens; a demoted token is re-quantized from what its
  // high slot holds, as LeanKV does; flushed tokens are group-encoded); the page manager carries
  // it out under the policy's slot strategy. PoolExhausted (nothing reserved, dropped or moved)
  // when a head needs a page the pool does not have.
  void reserve(std::span<const std::int64_t> requests, std::span<const std::int32_t> positions,
               std::span<const StepDecision> step = {});
  // A head's live tokens and their slots, in walk order (high pages, then low; slot order).
  void live_tokens(std::int64_t request, std::int32_t layer, std::int32_t head, std::vector<LiveToken>& tokens,
                   std::vector<SlotRef>& slots) const;
  // Adds probs[j] (walk order over every slot of the head's pages, as the decode kernel writes
  // them) to the score of each live slot j.
  void add_scores(std::int64_t request, std::int32_t layer, std::int32_t head, std::span<const float> probs);
  // Stores one token's key and value rows ([kv_dim] each) of one layer in the reserved slots.
  void write_token(std::int64_t request, std::int32_t layer, std::int32_t position, std::span<const float> key,
                   std::span<const float> value);
  // The pages of one head in walk order (into `pages`, which must outlive the returned input's use).
  void head_pages(std::int64_t request, std::int32_t layer, std::int32_t head, std::vector<PageRead>& pages) const;
  // The same pages as (page id, tier) pairs, flattened: what a resident backend's page table holds
  // of the head (docs/design.md §15).
  void head_page_ids(std::int64_t request, std::int32_t layer, std::int32_t head,
                     std::vector<std::int32_t>& ids_and_tiers) const;
  // The slot reserved for `position` in a head (what write_token writes); std::logic_error when the
  // position was not reserved.
  SlotRef write_slot(std::int64_t request, std::int32_t layer, std::int32_t head, std::int32_t position) const;
  // write_token for one head, into the slot a resident backend was told (write_slot's): the same
  // bytes. std::logic_error when `slot` is not the one reserved for `position`.
  void write_token_at(std::int64_t request, std::int32_t layer, std::int32_t head, const SlotRef& slot,
                      std::int32_t position, std::span<const float> key, std::span<const float> value);
  std::span<const TierRead> tiers() const { return tier_reads_; }
  // Admits `to` holding references to the pages of `from`'s first `tokens` tokens in every head
  // (UnifiedPageManager::share_prefix: no copy; a later write into a shared page copies it first),
  // and `from`'s FP8 scales. Uniform policies: every head holds positions 0 .. n-1 packed. On an
  // InputError `to` is not admitted.
  void share_prefix(std::int64_t from, std::int64_t to, std::int64_t tokens);
  // A prefix-cache hit: admits `to` holding references to `from`'s first `shared` tokens (whole
  // pages: share_prefix) and fresh pages for its prompt's other prompt_tokens - shared tokens
  // (UnifiedPageManager::extend), to be written by write_prompt_rows. PoolExhausted or
  // InputError: `to` is not admitted.
  void reserve_prompt_after_prefix(std::int64_t from, std::int64_t to, std::int64_t shared, std::int64_t prompt_tokens);
  // Frees every page of the request (finished, or preempted).
  void release(std::int64_t request);
  // Frees every page of a preempted request (counted in the manager's preemption statistics).
  void preempt(std::int64_t request);

  // Preemption by swap: a request's stored slots, copied out to host memory byte for byte, so
  // that swap_in can give it fresh pages holding exactly the same codes in the same walk order.
  struct Swapped {
    std::int64_t tokens = 0;
    std::vector<PagePool::SlotCodes> slots;  // [layer][kv_head][token], in walk order
    std::int64_t bytes() const;
  };
  // Copies the request's slots out and frees its pages. Uniform policies only (their heads hold
  // positions 0 .. n-1 packed); std::logic_error for an evicting policy.
  Swapped swap_out(std::int64_t request);
  // Admits the request again with pages for its tokens and restores the codes (PoolExhausted,
  // nothing kept, when they do not fit).
  void swap_in(std::int64_t request, const Swapped& swapped);
  // Tokens stored per head of a request (every head holds the same count under every policy:
  // they keep the same number of prompt tokens and evict one token per step alike).
  std::int64_t tokens(std::int64_t request) const;
  // Bytes of KV the request holds over all its heads (codes, metadata, scores, positions of its pages;
  // a page-selecting policy's page metadata, Quest's key ranges, is in the pages).
  std::int64_t bytes_held(std::int64_t request) const;
  // FP8 elements (keys and values) stored with a scale they exceed, |x| > 448 * scale, and so
  // clamped to ±448 * scale, since the cache was built: later tokens beyond a prompt's amax, or
  // beyond a calibrated scale. Per-page scales never saturate.
  std::int64_t fp8_saturated() const { return fp8_saturated_; }
  // FP8 elements stored since the cache was built (the count fp8_saturated is out of).
  std::int64_t fp8_stored() const { return fp8_stored_; }

 private:
  void check_finite(std::int64_t request, std::int32_t layer, std::int32_t head, std::span<const std::int32_t> positions,
                    std::span<const float> keys, std::span<const float> values) const;
  // InputError naming the request, layer, head, position and channel of a value beyond fp16's
  // largest finite 65504, for rows a tier stores in (or quantizes from) fp16.
  void check_fp16_range(std::int64_t request, std::int32_t layer, std::int32_t head,
                        std::span<const std::int32_t> positions, std::span<const float> rows, const char* part) const;
  // The fp32 FP8 scale of a head's keys (part 0) or values (part 1); 0 until its first block.
  float* fp8_scale(std::int64_t request, std::int32_t layer, std::int32_t head, int part);
  // Encodes n tokens' rows ([n][head_dim] each, kernels/cpu/page_encode.h) into the given slots of
  // one tier: per-channel key groups must be whole groups of consecutive slots. InputError naming
  // the request, layer, head and position for a non-finite value, before anything is stored.
  void store_block(std::int64_t request, std::int32_t layer, std::int32_t head, int tier,
                   std::span<const SlotRef> slots, std::span<const std::int32_t> positions,
                   std::span<const float> keys, std::span<const float> values);
  // FP8: adds to fp8_saturated_ the elements of x beyond 448 * scale.
  void count_fp8_saturated(std::span<const float> x, float scale);
  // fp8:scale=page: rows that fill whole low-tier pages ([n][head_dim], n a multiple of the page's
  // tokens, slot i of a page holding row i), each page encoded with its own amax / 448.
  EncodedBlock encode_fp8_pages(const KvFormat& format, std::span<const float> x, std::span<const SlotRef> slots,
                                std::span<const PageId> pages, std::span<const std::int32_t> positions,
                                const KvLocation& at) const;
  void store(std::int64_t request, std::int32_t layer, std::int32_t head, const SlotRef& slot,
             std::int32_t position, std::span<const float> key, std::span<const float> value);

  ModelConfig model_;
  const KvPolicy& policy_;
  // The policy declares two tiers, so a head may hold pages of both (even when the two formats
  // are the same); a one-tier policy's low side stays empty.
  bool uses_low_tier_;
  std::vector<KvTier> tiers_;
  std::vector<TierRead> tier_reads_;
  UnifiedPageManager manager_;
  std::map<std::int64_t, std::vector<float>> fp8_scales_;  // request -> [layer][kv head][key, value]
  std::int64_t fp8_saturated_ = 0, fp8_stored_ = 0;
};

}  // namespace kvcheck
