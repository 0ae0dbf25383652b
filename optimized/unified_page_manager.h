// LeanKV's page manager (docs/design.md §6; LeanKV sections 5.2-5.3 and Algorithm 1):
// the page pool, the circular free list and one bidirectional page table per (request, layer,
// kv-head), changed only through parallel KV compaction rounds (optimized/kv_compaction.h).
//
//   admit          a table per layer x kv-head, no pages yet;
//   prompt_phase   for a batch of admitted requests: round 1 allocates ceil(n / a) high pages per
//                  head (every prompt token at high precision); round 2, given each head's
//                  high / low tokens chosen by a policy, keeps ceil(h / a) pages high, re-formats
//                  the next ones as low pages, tops the low side up when the +1 of the table
//                  needs it, and recycles the rest. Tokens are then written packed (token k of
//                  a tier in page k / tpp, slot k % tpp);
//   decode_step    one plan per head (HeadStep below): optionally evict a live slot, optionally
//                  demote a live high token to low (it takes a free low slot), then append the new
//                  token at high (a free slot: the one a victim or the demoted token left, if any).
//                  At most one new page per head per step; nothing is recycled during generation,
//                  except by a flush (KIVI's fp16 residual, held at high, moved to low all at once:
//                  the low pages it needs are allocated and the emptied high pages but one
//                  recycled in the round) and by SpvLLM's free-block and sparse-copy strategies;
//   repack         per head and tier, live slots move into the outermost ceil(live / tpp) pages
//                  and the emptied pages are recycled;
//   extend         a prompted request whose heads hold only whole high pages (a prefix taken by
//                  share_prefix from the prefix cache) gets `tokens` more prompt slots per head:
//                  ceil(tokens / a) new high pages in one round, positions continuing the live
//                  count; the shared pages are not touched, so nothing is copied;
//   finish/preempt every page of the request returns to the free list (a shared one: its count
//                  drops, and it returns when no table lists it any more);
//   share_prefix   copy-on-write sharing (vLLM's fork / prefix reuse over these pages): an admitted,
//                  not yet prompted request takes, per head, references to the first
//                  ceil(tokens / a) high pages of another's same head (its full pages and its
//                  partly filled last one, which must hold exactly `tokens` live slots), no copy.
//                  A page's reference count (refcount) is the table entries that list it; a
//                  shared page (count > 1) is never written: a head that holds one only appends
//                  (no evict, demote or flush: sharing is for prefix-closed policies), and when
//                  its new token's slot is in a shared page, that page is first copied (bytes and
//                  live mask) to a fresh page that replaces it in this head's table alone, in a
//                  round of its own before the step's round. Repack skips a head that holds a
//                  shared page (compaction never moves or recycles a page another table lists).
//
// Tiers: every tier index here (SlotRef::tier, PageRef::tier, the `tier` arguments, the per-tier
// arrays HeadState::live and HeadStep::new_pages, PageManagerStats::tiers) is kHighTier or
// kLowTier (optimized/page_table.h), and per-tier arrays are indexed by those names, never by a
// literal 0 or 1. The pool's tier t is the same tier.
//
// Every operation validates first and changes nothing when it fails: InputError for bad input or
// a page table that would overflow (naming request / layer / head), PoolExhausted when the free
// list cannot satisfy the round (the caller can preempt and retry). The ids each head gets, and
// the free run left behind, are those of the sequential model oracles/page_manager_model.h, in
// parallel and in sequential mode.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "optimized/free_page_list.h"
#include "optimized/kv_compaction.h"
#include "optimized/page_pool.h"
#include "optimized/page_table.h"
#include "optimized/step_decision.h"

namespace kvcheck {

struct PageManagerConfig {
  PagePoolConfig pool;
  std::int64_t layers = 1;
  std::int64_t kv_heads = 1;
  std::int64_t max_seq_len = 4096;
  CompactionOptions compaction;
};

// One head's prompt-phase plan: how many tokens each tier keeps (the rest are pruned), and
// optionally their payloads (when empty, positions 0.. and score 0 are written).
struct PromptHeadPlan {
  std::int64_t high = 0;
  std::int64_t low = 0;
  std::span<const TokenPayload> high_payload;
  std::span<const TokenPayload> low_payload;
};
struct PromptRequest {
  std::int64_t request = 0;
  std::int64_t prompt_len = 0;
  std::vector<PromptHeadPlan> heads;  // layers * kv_heads, layer-major
};

// A slot of one head: the page_index-th page of a tier's side of the table, and the slot in it.
struct SlotRef {
  int tier = kHighTier;
  std::int64_t page_index = 0;
  std::int64_t slot = 0;
  bool operator==(const SlotRef&) const = default;
};

// One head's part of a decode step: the new token, appended at high precision, and what else
// the step does to the head. The decision's indices name the head's live tokens in walk order
// (live_slots) as they are before the step.
//   evict    the live token is dropped;
//   demote   a live high token moves to low (it takes the first dead low slot; re-quantized by
//            the caller). Only slot-reuse takes a demotion;
//   flush    KIVI's residual flush: every live high token moves to low (in walk order, into the
//            first dead low slots; re-encoded by the caller), the high pages but the first are
//            recycled, and the new token takes the first dead high slot, whatever `slots` says
//            (a head without high tokens appends as slot-reuse does). Excludes evict and demote;
//   slots    what happens to a slot the victim frees (SpvLLM's strategies): slot-reuse lets the
//            new token take the first dead slot; the others append the new token after the last
//            live slot of the last high page (a new page when there is none), free-block also
//            recycles the victim's page when the eviction empties it, and sparse-copy repacks
//            (repack(), every head) after a step in which one of its heads evicted.
struct DecodeHead {
  HeadKey head;
  TokenPayload token;
  StepDecision decision;
  SlotStrategy slots = SlotStrategy::kSlotReuse;
};

struct TierStats {  // PageManagerStats::tiers[kHighTier], [kLowTier]
  std::int64_t pages = 0;
  std::int64_t live_slots = 0;
  std::int64_t allocated_slots = 0;  // pages * tokens per page
};
struct PageManagerStats {
  std::int64_t pool_pages = 0;
  std::int64_t free_pages = 0;
  std::vector<TierStats> tiers;
  double internal_fragmentation = 0.0;  // 1 - live slots / allocated slots (0 when nothing allocated)
  std::map<std::int64_t, std::int64_t> bytes_per_request;
  std::int64_t ids_copied = 0;          // ids moved between the free list and tables, all rounds
  std::int64_t compaction_rounds = 0;
  double compaction_seconds = 0.0;      // coordination and copy, all rounds
  std::int64_t preemptions = 0;
  // Sharing: tier pages above count table entries, so a page two tables list counts twice;
  // free_pages + pages - shared_references = pool_pages.
  std::int64_t shared_pages = 0;       // pages listed by more than one table
  std::int64_t shared_references = 0;  // table entries beyond a page's first (sum of count - 1)
  std::int64_t cow_copies = 0;         // copy-on-write copies, all steps
};

class UnifiedPageManager {
 public:
  explicit UnifiedPageManager(PageManagerConfig config);

  const PageManagerConfig& config() const { return config_; }
  std::int64_t heads_per_request() const { return config_.layers * config_.kv_heads; }
  std::int64_t table_length() const { return table_length_; }

  void admit(std::int64_t request);
  void prompt_phase(std::span<const PromptRequest> batch);
  void decode_step(std::span<const DecodeHead> heads);
  void repack();
  void finish(std::int64_t request);
  void preempt(std::int64_t request);
  void share_prefix(std::int64_t from, std::int64_t to, std::int64_t tokens);
  void extend(std::int64_t request, std::int64_t tokens);
  // The table entries that list a page (0: free).
  std::int64_t refcount(PageId id) const;

  bool has_request(std::int64_t request) const { return requests_.contains(request); }
  bool prompted(std::int64_t request) const;
  std::vector<std::int64_t> requests() const;
  const PageTable& table(std::int64_t request, std::int32_t layer, std::int32_t head) const;
  std::int64_t live_tokens(std::int64_t request, std::int32_t layer, std::int32_t head, int tier) const;
  std::int64_t bytes_held(std::int64_t request, std::int32_t layer, std::int32_t head) const;
  // The head's live slots in walk order (high pages in table order, then low; slot order): what
  // a StepDecision's indices name.
  void live_slots(std::int64_t request, std::int32_t layer, std::int32_t head, std::vector<SlotRef>& slots) const;
  // The index-th of them (InputError naming the head when there are not that many).
  SlotRef live_slot(std::int64_t request, std::int32_t layer, std::int32_t head, std::size_t index) const;
  // The live slot of a token position in a tier, if any (a linear scan of the head's pages).
  std::optional<SlotRef> find_slot(std::int64_t request, std::int32_t layer, std::int32_t head, int tier,
                                   std::int32_t position) const;
  PageId page_of(std::int64_t request, std::int32_t layer, std::int32_t head, const SlotRef& slot) const;

  const PagePool& pool() const { return pool_; }
  PagePool& pool() { return pool_; }
  const FreePageList& free_list() const { return list_; }
  PageManagerStats stats() const;
  const CompactionRoundStats& last_round() const { return last_round_; }
  std::int64_t cow_copies() const { return cow_copies_; }

 private:
  struct HeadState {
    PageTable table;
    std::int64_t live[kTiers] = {};  // live tokens per tier
  };
  struct RequestState {
    bool prompted = false;
    std::vector<HeadState> heads;
  };

  RequestState& request_state(std::int64_t request, const char* operation);
  const RequestState& request_state(std::int64_t request, const char* operation) const;
  // The index of (layer, head) in RequestState::heads, layer-major (InputError naming the head
  // when there is no such layer or kv-head); both head_state overloads go through it.
  std::size_t head_index(std::int64_t request, std::int32_t layer, std::int32_t head, const char* operation) const;
  HeadState& head_state(std::int64_t request, std::int32_t layer, std::int32_t head, const char* operation);
  const HeadState& head_state(std::int64_t request, std::int32_t layer, std::int32_t head,
                              const char* operation) const;
  void record(const CompactionRoundStats& s);
  bool holds_shared(const HeadState& h) const;
  void release(std::int64_t request);
  // The first dead slot of a tier's pages, in table order; nullopt when all are live.
  std::optional<SlotRef> free_slot(const HeadState& h, int tier) const;
  // The index-th live slot of a head in walk order (index < its live tokens).
  SlotRef nth_live(const HeadState& h, std::size_t index) const;

  // One head's plan for a decode step, made before anything changes by one of three planners and
  // carried out by apply_step inside the step's compaction round: the pages the round gives the
  // head (new_pages, pushed high first) and takes back (drop, in the order they return to the
  // free list; ascending index within a tier), and where each token goes. Sharing (refcounted
  // pages) extends it without a new planner: a write into a shared page becomes a new page in
  // new_pages plus a copy, and dropping a shared page lowers its count instead of freeing it.
  struct PageRef {
    int tier = kHighTier;
    std::int64_t page_index = 0;
  };
  struct HeadStep {
    HeadState* head = nullptr;
    const DecodeHead* op = nullptr;
    std::optional<SlotRef> evict, demote;  // the decision's indices, resolved
    bool flush = false;                    // every live high token moves to low (the head holds some)
    std::int64_t new_pages[kTiers] = {};
    std::vector<PageRef> drop;
    // The new token's slot: nullopt, the first dead high slot once the other tokens have moved;
    // otherwise a page and slot (kNoPage: the new high page, whose slot 0 it takes).
    std::optional<std::pair<PageId, std::int64_t>> append_at;
    // Copy-on-write: the index of the shared high page the new token goes to, copied first.
    std::optional<std::int64_t> copy;
    std::int64_t allocate() const { return new_pages[kHighTier] + new_pages[kLowTier]; }
  };
  // Validation of one head's part of a step; its decision resolved to slots.
  HeadStep resolve_step(const DecodeHead& op);
  // The three planners: slot-reuse (evict, demote, the new token in a freed slot), the appending
  // strategies (no-op, free-block, sparse-copy), and a flush.
  void plan_reuse(HeadStep& s) const;
  void plan_append(HeadStep& s) const;
  void plan_flush(HeadStep& s) const;
  // Carries out a plan: `at` and `to` are the head's allocation and recycling positions in the round.
  void apply_step(HeadStep& s, std::int64_t at, std::int64_t to);
  // Copy-on-write for a step: the high page each head's new token goes to, copied first when it
  // is shared (HeadStep::copy), in a round before the step's.
  void plan_copies(std::vector<HeadStep>& steps);
  void copy_on_write(std::vector<HeadStep>& steps);
  // Moves a live high slot into the first dead low slot.
  void move_to_low(HeadState& h, PageId from, std::int64_t slot);

  PageManagerConfig config_;
  PagePool pool_;
  FreePageList list_;
  std::int64_t table_length_ = 0;
  std::map<std::int64_t, RequestState> requests_;
  CompactionRoundStats last_round_;
  std::int64_t ids_copied_ = 0;
  std::int64_t rounds_ = 0;
  double compaction_seconds_ = 0.0;
  std::int64_t preemptions_ = 0;
  std::vector<std::int32_t> extra_refs_;  // [pool pages] refcount - 1 of a listed page (0 unless shared)
  std::int64_t cow_copies_ = 0;
};

}  // namespace kvcheck
