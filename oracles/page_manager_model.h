// The sequential model of LeanKV's unified page manager (docs/design.md §6): what the
// free list and every page table must hold after each command. Plain and slow on purpose: free
// ids are a deque (the circular run read from the start pointer), heads are processed one by one,
// and every page lists the token position each of its slots holds. It knows nothing of optimized/ (oracles depend only on
// reference/); the properties hold the engine, parallel and sequential, against it.
//
// Definitions (the engine must reproduce them exactly):
//   - Heads are ordered by request (admission batch order for the prompt phase, op order for a
//     decode step, ascending request id for a repack), then layer, then kv-head.
//   - Allocation takes ids from the front of the free run, head after head; recycling appends
//     ids at the back, head after head. A round's allocations are checked against the free count
//     before the round (ids recycled in a round are not reused in the same round).
//   - A page table of length ceil(max_seq_len / a) + 1 (a, b: tokens per high / low page, b >= a)
//     lists high pages from the left and low pages from the right, each in push order.
//   - Prompt phase (per request, after admission): round 1 gives each head P = ceil(n / a) high
//     pages (n: prompt length); round 2, with h high and l low tokens chosen per head
//     (h + l <= n), keeps H = ceil(h / a) of them high (the first H), turns the next ones into
//     low pages (the low side in that order), allocates max(0, H + L - P) more low pages
//     (L = ceil(l / b); the +1 of the table length covers H + L = ceil(n / a) + 1) and recycles
//     the rest in order. Both rounds are checked together before anything changes.
//   - Slots: token k a prompt keeps in a tier is in page k / tpp, slot k % tpp of that tier
//     (in the order the plan lists them). "The first dead slot" of a tier is the first in table
//     order, slot order; the walk order of a head is its high pages, then its low pages, each in
//     table order and slot order (what a decode op's live-token indices count in).
//   - Decode step, per head, under the op's slot strategy:
//       slot-reuse  evict a live token (optional; its slot dies), demote a live high token
//                   (optional: it moves to the first dead low slot, a new low page when there is
//                   none), then the new token takes the first dead high slot (a new high page when
//                   there is none);
//       no-op, free-block, sparse-copy: the new token goes after the last live slot of the last
//                   high page as it is before the eviction (a new high page when that is its
//                   last slot, or there is no high page); the victim's slot dies; free-block also
//                   gives the victim's page back when it holds no live token and is not where the
//                   new token goes; no demotion;
//       flush       (a head that holds high tokens; otherwise as slot-reuse) every live high
//                   token, in walk order, moves to the first dead low slot (a new low page when
//                   there is none), the high pages but the first are given back in table order,
//                   and the new token takes slot 0 of the first; no victim, no demotion.
//     A head's new pages must fit its table beside the pages it holds before the step (pages it
//     gives back do not make room). After the step, when a sparse-copy op evicted, the whole
//     pool is repacked as below (SpvLLM's sparse copy).
//   - Repack: per head and tier, ceil(live / tokens_per_page) pages stay (the outermost ones);
//     the live slots of the others move, in table and slot order, into the first dead slots of
//     the kept ones, and the others are recycled, high before low, each in table order.
//   - Finish / preempt: every page of the request is recycled, head after head, high pages in
//     table order then low pages in table order.
//   - Sharing (copy-on-write pages): share(from, to, tokens) gives an admitted, not yet prompted
//     request, per head, references to the first ceil(tokens / a) high pages of `from`'s same
//     head (its full pages and its partly filled last one), which must hold exactly `tokens` live
//     slots (else kRejected); no low pages. `to` is then prompted, its next position `from`'s.
//     A page's reference count is the number of table entries that list it (refcount()):
//       * a page is free (count 0, in the free run) or listed by >= 1 table, never both;
//       * a shared page (count > 1) is never written: every table that lists it sees the same
//         slots (sharing_violation() checks it);
//       * a decode op on a head that holds a shared page only appends (an evict, demote or
//         flush is kRejected); when the slot the new token takes is in a shared page, that page
//         is first copied to a fresh page from the free run (copy-on-write), which replaces it
//         in this head's table only, before any other page of the step is taken: the copies
//         of a step are made first, in op order, and an op whose page the earlier ops of the
//         step have copied down to one reference writes it in place. A copy needs no table room;
//       * release gives back, in the usual order, only the pages whose count drops to 0;
//       * repack (and sparse-copy's) leaves a head that holds a shared page as it is: compaction
//         never moves or recycles a page another table still references.
//   - Failures change nothing: kTableFull (a head would need more table entries than it has;
//     checked first), kPoolExhausted (more ids than are free) or kRejected (a share or an op on
//     a shared head that is not allowed).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace kvcheck {

inline constexpr std::int32_t kModelDead = -1;

struct ModelPage {
  std::int32_t id = 0;
  std::vector<std::int32_t> slots;  // the token position each slot holds; kModelDead when none
};

struct ModelSlot {
  int tier = 0;
  std::int32_t position = 0;
  bool operator==(const ModelSlot&) const = default;
};

struct ModelHead {
  std::vector<ModelPage> pages[2];  // per tier (0 high, 1 low), in table order (index 0 outermost)
  std::set<std::int32_t> live(int tier) const;
  std::int64_t live_count(int tier) const;
  std::vector<ModelSlot> walk() const;  // the live tokens in walk order
};

struct ModelRequest {
  std::int64_t prompt_len = 0;
  bool prompted = false;
  std::int32_t next_position = 0;  // the position of the next decoded token
  std::vector<ModelHead> heads;    // layer * kv_heads + head
};

struct ModelPromptHead {
  std::vector<std::int32_t> high, low;  // positions kept at each tier (the rest are pruned)
};
struct ModelPrompt {
  std::int64_t request = 0;
  std::int64_t prompt_len = 0;
  std::vector<ModelPromptHead> heads;
};

// SpvLLM's slot strategies (optimized/step_decision.h, which oracles do not include).
enum class ModelSlots { kNoOp, kFreeBlock, kSparseCopy, kSlotReuse };

struct ModelDecodeOp {
  std::int64_t request = 0;
  std::int64_t layer = 0, head = 0;
  std::int32_t position = 0;           // the new token's position (appended at high)
  std::optional<ModelSlot> evict;      // a live token to drop
  std::optional<std::int32_t> demote;  // a live high token to move to low (slot-reuse only)
  bool flush = false;                  // every high token moves to low (no evict, no demote)
  ModelSlots slots = ModelSlots::kSlotReuse;
};

enum class ModelOutcome { kOk, kPoolExhausted, kTableFull, kRejected };

class PageManagerModel {
 public:
  PageManagerModel(std::int64_t pool_pages, std::int64_t layers, std::int64_t kv_heads,
                   std::int64_t high_tokens_per_page, std::int64_t low_tokens_per_page, std::int64_t max_seq_len);

  std::int64_t pool_pages() const { return pool_pages_; }
  std::int64_t heads_per_request() const { return layers_ * kv_heads_; }
  std::int64_t kv_heads() const { return kv_heads_; }
  std::int64_t layers() const { return layers_; }
  std::int64_t tokens_per_page(int tier) const { return tier == 0 ? high_tpp_ : low_tpp_; }
  std::int64_t max_seq_len() const { return max_seq_len_; }
  std::int64_t table_length() const;

  void admit(std::int64_t request);  // a request id not present
  ModelOutcome prompt(const std::vector<ModelPrompt>& batch);
  ModelOutcome decode(const std::vector<ModelDecodeOp>& ops);
  void release(std::int64_t request);  // finish or preempt
  ModelOutcome share(std::int64_t from, std::int64_t to, std::int64_t tokens);
  // `tokens` more prompt slots per head of a prompted request whose heads hold only whole high
  // pages: new pages taken head after head, positions continuing each head's live count.
  ModelOutcome extend(std::int64_t request, std::int64_t tokens);
  // The table entries that list a page (0: free).
  std::int64_t refcount(std::int32_t id) const;
  bool holds_shared(const ModelHead& h) const;
  // The request whose token a request's position is (its own, or, for a position a share gave
  // it, the sharer's, followed back). Kept for released requests.
  std::int64_t writer(std::int64_t request, std::int32_t position) const;
  // "" when the sharing invariants hold, else the first broken one.
  std::string sharing_violation() const;
  std::int64_t copies() const { return copies_; }  // copy-on-write copies made
  void repack();
  ModelHead& head(std::int64_t request, std::int64_t layer, std::int64_t head);
  const ModelHead& head(std::int64_t request, std::int64_t layer, std::int64_t head) const;

  const std::deque<std::int32_t>& free_run() const { return free_; }
  std::int64_t start() const { return start_; }  // the free list's start pointer
  const std::map<std::int64_t, ModelRequest>& requests() const { return requests_; }

 private:
  std::int32_t take();
  void give(std::int32_t id) { free_.push_back(id); }
  ModelPage new_page(int tier);  // taken from the free run, every slot dead
  // The first dead slot of a tier, taking a new page when there is none: {page index, slot}.
  std::pair<std::size_t, std::size_t> first_dead(ModelHead& h, int tier);
  void decode_head(ModelHead& h, const ModelDecodeOp& op);
  std::int64_t taken_ = 0;  // ids taken since construction (a step's demand, by difference)
  // The page a decode op's new token goes to, when it is one the head holds: {tier 0 index}.
  std::optional<std::size_t> append_page(const ModelHead& h, const ModelDecodeOp& op) const;
  std::int64_t copies_ = 0;
  // request -> (the request it shared from, the first position of its own); never erased.
  std::map<std::int64_t, std::pair<std::int64_t, std::int32_t>> lineage_;

  std::int64_t pool_pages_, layers_, kv_heads_, high_tpp_, low_tpp_, max_seq_len_;
  std::deque<std::int32_t> free_;
  std::int64_t start_ = 0;
  std::map<std::int64_t, ModelRequest> requests_;
};

}  // namespace kvcheck
