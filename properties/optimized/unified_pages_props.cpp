// Stateful properties of LeanKV's unified page manager (optimized/unified_page_manager.h) against
// the sequential model oracles/page_manager_model.h. Each case draws a small configuration and a
// sequence of at least kMinCommands commands (admit, prompt phase with random per-head tier
// choices, decode step with evict / demote / flush / append under each of SpvLLM's slot
// strategies, repacking, finish, preempt, and sharing: a new request taking references to another's
// prefix pages, appends that copy a shared page first, releases that only drop a count) and runs it on
// two engines at once, one in parallel compaction mode (threads forced on every round) and one in
// sequential mode. After every command, for both engines:
//   - every page id is free (in the free run, count 0) or listed by the tables as many times as
//     its reference count, the model's; free + listed = pool (the model's sharing invariants hold);
//   - a shared page is never written: each table that lists it sees the model's slots for it
//     (the model keeps one copy per table, so a write through one table shows in the others);
//   - the free run (ids from the start pointer, and the start pointer itself) is the model's: one
//     contiguous circular run, and parallel compaction gives exactly the sequential model's pages;
//   - every table lists the model's pages, high from the left and low from the right, with only
//     empty entries between them (no overlap), and pages are formatted for their owner and tier;
//   - every slot of every page holds the model's token (or is dead where the model's is), and
//     every live slot's payload (position, score) is intact although free pages and dead slots
//     are poisoned (0xFF: NaN score, position -1), which they are checked to be; live counts
//     are the live slots;
//   - a finished or preempted request owns nothing another table does not still list;
//   - a command the model rejects (pool exhausted, page table full) throws PoolExhausted /
//     InputError and changes nothing.
// A second property fills the pool until a prompt phase fails, checks nothing changed, preempts
// and retries.
//
// Gate: kGateSequences sequences (RC_PARAMS seed fixed by property_main.cc). Long run:
//   RC_PARAMS="seed=424242 max_success=20000" build/properties/kvcheck_property_tests
//       --gtest_filter='UnifiedPagesProps.*'
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/state.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "optimized/pool_exhausted.h"
#include "optimized/unified_page_manager.h"
#include "oracles/page_manager_model.h"
#include "properties/support/property_check.h"
#include "reference/errors.h"

namespace kvcheck {
namespace {

using testing::check_property;

constexpr int kGateSequences = 500;
constexpr std::size_t kMinCommands = 100;
constexpr int kMaxRequests = 4;
constexpr std::int64_t kHeadDim = 16;
// Decoding stays within max_seq_len positions in a real engine, and then a table never fills
// (every step appends a position, so a head's peak high plus peak low tokens stay <= max_seq_len).
// The properties decode up to this many positions past it, so that overflows happen and are
// checked to be rejected before anything changes.
constexpr std::int64_t kPastMaxSeqLen = 12;

float score_of(std::int64_t request, std::int64_t layer, std::int64_t head, std::int32_t position) {
  return static_cast<float>(request * 1000 + layer * 100 + head * 10) + 0.25f * static_cast<float>(position);
}

PageManagerConfig make_config(std::int64_t pages, std::int64_t page_bytes, std::int64_t layers, std::int64_t kv_heads,
                              std::int64_t max_seq_len, CompactionMode mode) {
  PageManagerConfig c;
  c.pool.pages = pages;
  c.pool.page_bytes = page_bytes;
  c.pool.head_dim = kHeadDim;
  c.pool.poison = true;
  c.layers = layers;
  c.kv_heads = kv_heads;
  c.max_seq_len = max_seq_len;
  c.compaction.mode = mode;
  c.compaction.threads = 2;
  c.compaction.min_parallel = 1;  // threads on every round, however small
  return c;
}

struct Sut {
  std::unique_ptr<UnifiedPageManager> engines[2];  // parallel, sequential
};

// ---- the invariants ---------------------------------------------------------------------------

void check_engine(const PageManagerModel& m, const UnifiedPageManager& e) {
  const PagePool& pool = e.pool();
  const std::int64_t n = m.pool_pages();
  // Free run and start pointer.
  const std::vector<PageId> free_ids = e.free_list().free_ids();
  RC_ASSERT(free_ids == std::vector<PageId>(m.free_run().begin(), m.free_run().end()));
  RC_ASSERT(e.free_list().start_position() == m.start());
  std::vector<int> places(static_cast<std::size_t>(n), 0);
  for (PageId id : free_ids) {
    places[static_cast<std::size_t>(id)] += 1;
    RC_ASSERT(pool.owner(id).free());
    RC_ASSERT(pool.live_count(id) == 0);
    RC_ASSERT(e.refcount(id) == 0);
    const std::span<const std::byte> bytes = pool.bytes(id);
    RC_ASSERT(std::all_of(bytes.begin(), bytes.end(), [](std::byte b) { return b == std::byte{0xFF}; }));
  }
  // Requests and tables.
  std::vector<std::int64_t> model_ids;
  for (const auto& [id, r] : m.requests()) model_ids.push_back(id);
  RC_ASSERT(e.requests() == model_ids);
  const std::string sharing = m.sharing_violation();
  if (!sharing.empty()) RC_FAIL("model: " + sharing);
  std::int64_t used = 0;
  for (const auto& [id, r] : m.requests()) {
    const bool sharer = m.writer(id, -1) != id;  // its table lists pages another request formatted
    for (std::int64_t l = 0; l < m.layers(); ++l) {
      for (std::int64_t k = 0; k < m.kv_heads(); ++k) {
        const auto layer = static_cast<std::int32_t>(l);
        const auto head = static_cast<std::int32_t>(k);
        const ModelHead& mh = r.heads[static_cast<std::size_t>(l * m.kv_heads() + k)];
        const PageTable& t = e.table(id, layer, head);
        const std::string where = t.key().where();
        RC_ASSERT(t.length() == m.table_length());
        const auto high = static_cast<std::int64_t>(mh.pages[kHighTier].size());
        const auto low = static_cast<std::int64_t>(mh.pages[kLowTier].size());
        RC_ASSERT(t.count(kHighTier) == high);
        RC_ASSERT(t.count(kLowTier) == low);
        RC_ASSERT(high + low <= t.length());
        const std::span<const PageId> entries = t.entries();
        for (std::int64_t i = 0; i < t.length(); ++i) {
          const PageId want = i < high ? mh.pages[kHighTier][static_cast<std::size_t>(i)].id
                              : i >= t.length() - low ? mh.pages[kLowTier][static_cast<std::size_t>(t.length() - 1 - i)].id
                                                      : kNoPage;
          if (entries[static_cast<std::size_t>(i)] != want) RC_FAIL("table entry " + std::to_string(i) + " differs from the model");
        }
        used += high + low;
        for (int tier : {kHighTier, kLowTier}) {
          std::int64_t live = 0;
          for (std::int64_t i = 0; i < t.count(tier); ++i) {
            const PageId pid = t.at(tier, i);
            const std::vector<std::int32_t>& want = mh.pages[tier][static_cast<std::size_t>(i)].slots;
            places[static_cast<std::size_t>(pid)] += 1;
            RC_ASSERT(pool.owner(pid).tier == tier);
            RC_ASSERT(pool.owner(pid).head.layer == layer && pool.owner(pid).head.head == head);
            if (!sharer) RC_ASSERT(pool.owner(pid).head.request == id);
            RC_ASSERT(static_cast<std::int64_t>(want.size()) == pool.tokens_per_page(tier));
            for (std::int64_t s = 0; s < pool.tokens_per_page(tier); ++s) {
              const TokenPayload p = pool.payload(pid, s);
              const std::int32_t model = want[static_cast<std::size_t>(s)];
              if (pool.live(pid, s)) {
                ++live;
                if (p.position != model || p.score != score_of(m.writer(id, p.position), l, k, p.position)) {
                  RC_FAIL(where + ": live slot " + std::to_string(s) + " of page " + std::to_string(pid) +
                          " holds position " + std::to_string(p.position) + ", the model's " + std::to_string(model));
                }
              } else if (model != kModelDead) {
                RC_FAIL(where + ": slot " + std::to_string(s) + " of page " + std::to_string(pid) +
                        " is dead, the model's holds position " + std::to_string(model));
              } else if (p.position != -1 || !std::isnan(p.score)) {
                RC_FAIL(where + ": dead slot " + std::to_string(s) + " of page " +
                        std::to_string(pid) + " is not poisoned");
              }
            }
          }
          RC_ASSERT(e.live_tokens(id, layer, head, tier) == live);
        }
      }
    }
  }
  std::int64_t shared_references = 0;
  for (PageId id = 0; id < static_cast<PageId>(n); ++id) {
    const std::int64_t count = m.refcount(id);
    if (e.refcount(id) != count) {
      RC_FAIL("page " + std::to_string(id) + ": reference count " + std::to_string(e.refcount(id)) + ", the model's " +
              std::to_string(count));
    }
    // Free: once, in the free run; listed: once per table entry.
    if (places[static_cast<std::size_t>(id)] != std::max<std::int64_t>(count, 1)) {
      RC_FAIL("page " + std::to_string(id) + " is in " + std::to_string(places[static_cast<std::size_t>(id)]) +
              " places, its count is " + std::to_string(count));
    }
    shared_references += std::max<std::int64_t>(count - 1, 0);
  }
  RC_ASSERT(static_cast<std::int64_t>(free_ids.size()) + used - shared_references == n);
  const PageManagerStats s = e.stats();
  RC_ASSERT(s.shared_references == shared_references);
  RC_ASSERT(s.free_pages + s.tiers[0].pages + s.tiers[1].pages - s.shared_references == n);
}

void check_all(const PageManagerModel& m, const Sut& sut) {
  for (const auto& e : sut.engines) check_engine(m, *e);
}

// Runs `op` on an engine and checks that it fails exactly as the model did.
template <typename Op>
void expect_outcome(ModelOutcome outcome, UnifiedPageManager& e, Op&& op) {
  switch (outcome) {
    case ModelOutcome::kOk: op(e); break;
    case ModelOutcome::kPoolExhausted: RC_ASSERT_THROWS_AS(op(e), PoolExhausted); break;
    case ModelOutcome::kTableFull:
    case ModelOutcome::kRejected: RC_ASSERT_THROWS_AS(op(e), InputError); break;
  }
}

using Cmd = rc::state::Command<PageManagerModel, Sut>;

// Outcomes seen (printed after the gate property, so a run shows that rejections were exercised).
struct OutcomeCounts {
  long ok = 0, exhausted = 0, table_full = 0, rejected = 0, commands = 0, shares = 0, copies = 0, extends = 0;
  void add(ModelOutcome o) {
    (o == ModelOutcome::kOk              ? ok
     : o == ModelOutcome::kPoolExhausted ? exhausted
     : o == ModelOutcome::kTableFull     ? table_full
                                         : rejected) += 1;
  }
};
OutcomeCounts g_counts;

// ---- commands -------------------------------------------------------------------------------

struct Admit : Cmd {
  std::int64_t id = 0;
  explicit Admit(const PageManagerModel& m) {
    RC_PRE(static_cast<int>(m.requests().size()) < kMaxRequests);
    id = m.requests().empty() ? 0 : m.requests().rbegin()->first + 1;
  }
  void checkPreconditions(const PageManagerModel& m) const override {
    RC_PRE(!m.requests().contains(id));
  }
  void apply(PageManagerModel& m) const override { m.admit(id); }
  void run(const PageManagerModel& m, Sut& sut) const override {
    PageManagerModel next = m;
    apply(next);
    for (auto& e : sut.engines) e->admit(id);
    check_all(next, sut);
  }
  void show(std::ostream& os) const override { os << "Admit(" << id << ")"; }
};

struct Prompt : Cmd {
  std::vector<ModelPrompt> batch;
  explicit Prompt(const PageManagerModel& m) {
    std::vector<std::int64_t> waiting;
    for (const auto& [id, r] : m.requests()) {
      if (!r.prompted) waiting.push_back(id);
    }
    RC_PRE(!waiting.empty());
    const std::size_t count = *rc::gen::inRange<std::size_t>(1, std::min<std::size_t>(2, waiting.size()) + 1);
    for (std::size_t q = 0; q < count; ++q) {
      ModelPrompt p;
      p.request = waiting[q];
      p.prompt_len = *rc::gen::inRange<std::int64_t>(1, m.max_seq_len());
      std::mt19937 rng(*rc::gen::arbitrary<std::uint32_t>());
      if (*rc::gen::inRange(0, 3) == 0) {  // a full policy: every head keeps every token high, in order (shareable)
        ModelPromptHead ph;
        for (std::int32_t pos = 0; pos < static_cast<std::int32_t>(p.prompt_len); ++pos) ph.high.push_back(pos);
        p.heads.assign(static_cast<std::size_t>(m.heads_per_request()), ph);
        batch.push_back(std::move(p));
        continue;
      }
      for (std::int64_t h = 0; h < m.heads_per_request(); ++h) {
        std::vector<std::int32_t> order(static_cast<std::size_t>(p.prompt_len));
        for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<std::int32_t>(i);
        std::shuffle(order.begin(), order.end(), rng);
        const auto high = static_cast<std::size_t>(std::uniform_int_distribution<std::int64_t>(0, p.prompt_len)(rng));
        const auto low = static_cast<std::size_t>(
            std::uniform_int_distribution<std::int64_t>(0, p.prompt_len - static_cast<std::int64_t>(high))(rng));
        ModelPromptHead ph;
        ph.high.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(high));
        ph.low.assign(order.begin() + static_cast<std::ptrdiff_t>(high),
                      order.begin() + static_cast<std::ptrdiff_t>(high + low));
        p.heads.push_back(std::move(ph));
      }
      batch.push_back(std::move(p));
    }
  }
  void checkPreconditions(const PageManagerModel& m) const override {
    for (const ModelPrompt& p : batch) {
      RC_PRE(m.requests().contains(p.request));
      RC_PRE(!m.requests().at(p.request).prompted);
    }
  }
  void apply(PageManagerModel& m) const override { m.prompt(batch); }
  void run(const PageManagerModel& m, Sut& sut) const override {
    PageManagerModel next = m;
    const ModelOutcome outcome = next.prompt(batch);
    // Payloads, kept alive for the call.
    std::vector<std::vector<TokenPayload>> payloads;
    std::vector<PromptRequest> requests;
    for (const ModelPrompt& p : batch) {
      PromptRequest r;
      r.request = p.request;
      r.prompt_len = p.prompt_len;
      for (std::int64_t h = 0; h < m.heads_per_request(); ++h) {
        const ModelPromptHead& ph = p.heads[static_cast<std::size_t>(h)];
        const std::int64_t layer = h / m.kv_heads(), head = h % m.kv_heads();
        auto make = [&](const std::vector<std::int32_t>& positions) {
          std::vector<TokenPayload> v;
          for (std::int32_t pos : positions) v.push_back({pos, score_of(p.request, layer, head, pos)});
          return v;
        };
        payloads.push_back(make(ph.high));
        payloads.push_back(make(ph.low));
        r.heads.push_back({static_cast<std::int64_t>(ph.high.size()), static_cast<std::int64_t>(ph.low.size()), {}, {}});
      }
      requests.push_back(std::move(r));
    }
    std::size_t next_payload = 0;
    for (PromptRequest& r : requests) {
      for (PromptHeadPlan& h : r.heads) {
        h.high_payload = payloads[next_payload++];
        h.low_payload = payloads[next_payload++];
      }
    }
    for (auto& e : sut.engines) expect_outcome(outcome, *e, [&](UnifiedPageManager& x) { x.prompt_phase(requests); });
    g_counts.add(outcome);
    check_all(next, sut);
  }
  void show(std::ostream& os) const override {
    os << "Prompt(";
    for (const ModelPrompt& p : batch) {
      os << "req " << p.request << " len " << p.prompt_len << " [";
      for (const ModelPromptHead& h : p.heads) os << h.high.size() << "h/" << h.low.size() << "l ";
      os << "] ";
    }
    os << ")";
  }
};

SlotStrategy engine_slots(ModelSlots s) {
  switch (s) {
    case ModelSlots::kNoOp: return SlotStrategy::kNoOp;
    case ModelSlots::kFreeBlock: return SlotStrategy::kFreeBlock;
    case ModelSlots::kSparseCopy: return SlotStrategy::kSparseCopy;
    case ModelSlots::kSlotReuse: return SlotStrategy::kSlotReuse;
  }
  return SlotStrategy::kSlotReuse;
}

// The index of a live token in a head's walk order, by the model (the decision's indices).
std::size_t walk_index(const ModelHead& h, ModelSlot token) {
  const std::vector<ModelSlot> walk = h.walk();
  const auto it = std::find(walk.begin(), walk.end(), token);
  RC_ASSERT(it != walk.end());
  return static_cast<std::size_t>(it - walk.begin());
}

// One decode step over one request, under one slot strategy (slot-reuse drawn twice as often).
// Per head: a flush (a quarter of the heads), or an optional victim (any tier) and, under
// slot-reuse, an optional demotion.
struct Decode : Cmd {
  std::vector<ModelDecodeOp> ops;
  explicit Decode(const PageManagerModel& m) {
    std::vector<std::int64_t> ready;
    for (const auto& [id, r] : m.requests()) {
      if (r.prompted && r.next_position < m.max_seq_len() + kPastMaxSeqLen) ready.push_back(id);
    }
    RC_PRE(!ready.empty());
    const std::int64_t id = *rc::gen::elementOf(ready);
    const ModelRequest& r = m.requests().at(id);
    const ModelSlots slots = *rc::gen::element(ModelSlots::kSlotReuse, ModelSlots::kSlotReuse, ModelSlots::kNoOp,
                                               ModelSlots::kFreeBlock, ModelSlots::kSparseCopy);
    for (std::int64_t h = 0; h < m.heads_per_request(); ++h) {
      if (!*rc::gen::inRange(0, 4)) continue;  // a quarter of the heads skip the step
      const ModelHead& mh = r.heads[static_cast<std::size_t>(h)];
      ModelDecodeOp op;
      op.request = id;
      op.layer = h / m.kv_heads();
      op.head = h % m.kv_heads();
      op.position = r.next_position;
      op.slots = slots;
      if (m.holds_shared(mh) && *rc::gen::inRange(0, 8) != 0) {  // only appends (mostly: else rejected)
        ops.push_back(op);
        continue;
      }
      if (*rc::gen::inRange(0, 4) == 0) {
        op.flush = true;
        ops.push_back(op);
        continue;
      }
      const std::set<std::int32_t> live[2] = {mh.live(kHighTier), mh.live(kLowTier)};
      std::set<std::int32_t> high = live[kHighTier];
      if (*rc::gen::inRange(0, 3) == 0 && (!live[0].empty() || !live[1].empty())) {
        const int tier = live[0].empty() ? 1 : live[1].empty() ? 0 : *rc::gen::inRange(0, 2);
        op.evict = ModelSlot{tier, *rc::gen::elementOf(std::vector<std::int32_t>(live[tier].begin(), live[tier].end()))};
        if (tier == 0) high.erase(op.evict->position);
      }
      if (slots == ModelSlots::kSlotReuse && *rc::gen::inRange(0, 3) == 0 && !high.empty()) {
        op.demote = *rc::gen::elementOf(std::vector<std::int32_t>(high.begin(), high.end()));
      }
      ops.push_back(op);
    }
  }
  void checkPreconditions(const PageManagerModel& m) const override {
    for (const ModelDecodeOp& op : ops) {
      RC_PRE(m.requests().contains(op.request));
      const ModelRequest& r = m.requests().at(op.request);
      RC_PRE(r.prompted);
      RC_PRE(op.position >= r.next_position && op.position < m.max_seq_len() + kPastMaxSeqLen);
      const ModelHead& mh = r.heads[static_cast<std::size_t>(op.layer * m.kv_heads() + op.head)];
      if (op.evict) RC_PRE(mh.live(op.evict->tier).contains(op.evict->position));
      if (op.demote) RC_PRE(mh.live(kHighTier).contains(*op.demote));
    }
  }
  void apply(PageManagerModel& m) const override { m.decode(ops); }
  void run(const PageManagerModel& m, Sut& sut) const override {
    PageManagerModel next = m;
    const ModelOutcome outcome = next.decode(ops);
    std::vector<DecodeHead> step;
    for (const ModelDecodeOp& op : ops) {
      const ModelHead& mh = m.head(op.request, op.layer, op.head);
      DecodeHead d{HeadKey{op.request, static_cast<std::int32_t>(op.layer), static_cast<std::int32_t>(op.head)},
                   TokenPayload{op.position, score_of(op.request, op.layer, op.head, op.position)}, {},
                   engine_slots(op.slots)};
      if (op.evict) d.decision.evict = walk_index(mh, *op.evict);
      if (op.demote) d.decision.demote = walk_index(mh, ModelSlot{kHighTier, *op.demote});
      d.decision.flush = op.flush;
      step.push_back(d);
    }
    for (auto& e : sut.engines) expect_outcome(outcome, *e, [&](UnifiedPageManager& x) { x.decode_step(step); });
    g_counts.add(outcome);
    check_all(next, sut);
  }
  void show(std::ostream& os) const override {
    static const char* const names[] = {"no-op", "free-block", "sparse-copy", "slot-reuse"};
    os << "Decode(";
    for (const ModelDecodeOp& op : ops) {
      os << "[req " << op.request << " L" << op.layer << "H" << op.head << " pos " << op.position << " "
         << names[static_cast<int>(op.slots)];
      if (op.evict) os << " evict t" << op.evict->tier << ":" << op.evict->position;
      if (op.demote) os << " demote " << *op.demote;
      if (op.flush) os << " flush";
      os << "] ";
    }
    os << ")";
  }
};

struct Release : Cmd {
  std::int64_t id = 0;
  bool preempt = false;
  explicit Release(const PageManagerModel& m) {
    RC_PRE(!m.requests().empty());
    std::vector<std::int64_t> ids;
    for (const auto& [rid, r] : m.requests()) ids.push_back(rid);
    id = *rc::gen::elementOf(ids);
    preempt = *rc::gen::arbitrary<bool>();
  }
  void checkPreconditions(const PageManagerModel& m) const override { RC_PRE(m.requests().contains(id)); }
  void apply(PageManagerModel& m) const override { m.release(id); }
  void run(const PageManagerModel& m, Sut& sut) const override {
    PageManagerModel next = m;
    apply(next);
    for (auto& e : sut.engines) {
      if (preempt) e->preempt(id); else e->finish(id);
      RC_ASSERT(!e->has_request(id));
      for (PageId p = 0; p < static_cast<PageId>(m.pool_pages()); ++p) {
        if (e->pool().owner(p).head.request == id && next.refcount(p) == 0) {
          RC_FAIL("a released request still owns page " + std::to_string(p) + ", which no table lists");
        }
      }
    }
    check_all(next, sut);
  }
  void show(std::ostream& os) const override { os << (preempt ? "Preempt(" : "Finish(") << id << ")"; }
};

// A new request takes references to the prefix pages of a prompted one (fork, or a prefix hit):
// `tokens` is all of the source's first head's high tokens, or whole pages of them, or any count
// (which the model rejects unless every head's first pages hold exactly that many live slots).
struct Share : Cmd {
  std::int64_t from = 0, to = 0, tokens = 0;
  explicit Share(const PageManagerModel& m) {
    RC_PRE(static_cast<int>(m.requests().size()) < kMaxRequests);
    std::vector<std::int64_t> prompted;
    for (const auto& [id, r] : m.requests()) {
      if (r.prompted) prompted.push_back(id);
    }
    RC_PRE(!prompted.empty());
    from = *rc::gen::elementOf(prompted);
    to = m.requests().rbegin()->first + 1;
    const std::int64_t live = std::max<std::int64_t>(1, m.requests().at(from).heads[0].live_count(kHighTier));
    const std::int64_t a = m.tokens_per_page(kHighTier);
    tokens = *rc::gen::element(live, live, std::max(a, live / a * a), *rc::gen::inRange<std::int64_t>(1, live + 1));
  }
  void checkPreconditions(const PageManagerModel& m) const override {
    RC_PRE(m.requests().contains(from) && !m.requests().contains(to));
    RC_PRE(static_cast<int>(m.requests().size()) < kMaxRequests);
  }
  void apply(PageManagerModel& m) const override {
    m.admit(to);
    m.share(from, to, tokens);
  }
  void run(const PageManagerModel& m, Sut& sut) const override {
    PageManagerModel next = m;
    next.admit(to);
    const ModelOutcome outcome = next.share(from, to, tokens);
    for (auto& e : sut.engines) {
      e->admit(to);
      expect_outcome(outcome, *e, [&](UnifiedPageManager& x) { x.share_prefix(from, to, tokens); });
    }
    g_counts.shares += outcome == ModelOutcome::kOk;
    g_counts.add(outcome);
    check_all(next, sut);
  }
  void show(std::ostream& os) const override { os << "Share(" << from << " -> " << to << ", " << tokens << " tokens)"; }
};

// A prefix-cache hit's second half: a request holding shared whole pages takes pages for the rest
// of its prompt. Any prompted request whose heads hold positions 0 .. n-1 in order, as a prompt's
// do (the new positions continue n); the model rejects one whose heads are not whole high pages.
bool packed(const ModelRequest& r) {
  for (const ModelHead& h : r.heads) {
    const std::vector<ModelSlot> walk = h.walk();
    for (std::size_t i = 0; i < walk.size(); ++i) {
      if (walk[i].position != static_cast<std::int32_t>(i)) return false;
    }
  }
  return true;
}

struct Extend : Cmd {
  std::int64_t id = 0, tokens = 0;
  explicit Extend(const PageManagerModel& m) {
    std::vector<std::int64_t> prompted;
    for (const auto& [rid, r] : m.requests()) {
      if (r.prompted && packed(r)) prompted.push_back(rid);
    }
    RC_PRE(!prompted.empty());
    id = *rc::gen::elementOf(prompted);
    tokens = *rc::gen::inRange<std::int64_t>(1, 3 * m.tokens_per_page(kHighTier) + 1);
  }
  void checkPreconditions(const PageManagerModel& m) const override {
    RC_PRE(m.requests().contains(id) && packed(m.requests().at(id)));
  }
  void apply(PageManagerModel& m) const override { m.extend(id, tokens); }
  void run(const PageManagerModel& m, Sut& sut) const override {
    PageManagerModel next = m;
    const ModelOutcome outcome = next.extend(id, tokens);
    for (auto& e : sut.engines) {
      expect_outcome(outcome, *e, [&](UnifiedPageManager& x) { x.extend(id, tokens); });
      g_counts.extends += outcome == ModelOutcome::kOk;
      if (outcome != ModelOutcome::kOk) continue;
      // The cache writes each token's payload as it stores the rows; here, the test's scores.
      for (std::int32_t l = 0; l < m.layers(); ++l) {
        for (std::int32_t k = 0; k < m.kv_heads(); ++k) {
          std::vector<SlotRef> slots;
          e->live_slots(id, l, k, slots);
          for (const SlotRef& s : slots) {
            const PageId pid = e->page_of(id, l, k, s);
            const std::int32_t position = e->pool().payload(pid, s.slot).position;
            if (e->refcount(pid) == 1 && position >= static_cast<std::int32_t>(slots.size() - tokens)) {
              e->pool().put(pid, s.slot, TokenPayload{position, score_of(id, l, k, position)});
            }
          }
        }
      }
    }
    g_counts.add(outcome);
    check_all(next, sut);
  }
  void show(std::ostream& os) const override { os << "Extend(" << id << ", " << tokens << " tokens)"; }
};

struct Repack : Cmd {
  explicit Repack(const PageManagerModel&) {}
  void apply(PageManagerModel& m) const override { m.repack(); }
  void run(const PageManagerModel& m, Sut& sut) const override {
    PageManagerModel next = m;
    apply(next);
    for (auto& e : sut.engines) e->repack();
    check_all(next, sut);
  }
  void show(std::ostream& os) const override { os << "Repack"; }
};

// ---- the sequences ---------------------------------------------------------------------------

struct PoolSetup {
  std::int64_t pages, page_bytes, layers, kv_heads, max_seq_len;
};

PoolSetup draw_setup() {
  PoolSetup s;
  s.page_bytes = *rc::gen::element<std::int64_t>(160, 224, 320, 384);  // tokens per high/low page: 4/4, 4/8, 8/8, 8/12
  s.layers = *rc::gen::inRange<std::int64_t>(1, 3);
  s.kv_heads = *rc::gen::inRange<std::int64_t>(1, 3);
  s.max_seq_len = *rc::gen::inRange<std::int64_t>(6, 33);
  s.pages = *rc::gen::inRange<std::int64_t>(6, 49);
  return s;
}

// A commands generator whose sequences have at least `n` commands (it redraws shorter ones); its
// shrinks may be shorter, so counterexamples still shrink freely.
template <typename T>
rc::Gen<T> at_least(std::size_t n, rc::Gen<T> gen) {
  return rc::Gen<T>([=](const rc::Random& random, int) {
    rc::Random r = random;
    for (;;) {
      rc::Shrinkable<T> s = gen(r.split(), static_cast<int>(n + n / 4));
      if (s.value().size() >= n) return s;
    }
  });
}

TEST(UnifiedPagesProps, EngineMatchesTheSequentialModelAfterEveryCommand) {
  check_property("unified pages: parallel and sequential engines vs the model", kGateSequences, [] {
    const PoolSetup s = draw_setup();
    Sut sut;
    sut.engines[0] = std::make_unique<UnifiedPageManager>(
        make_config(s.pages, s.page_bytes, s.layers, s.kv_heads, s.max_seq_len, CompactionMode::kParallel));
    sut.engines[1] = std::make_unique<UnifiedPageManager>(
        make_config(s.pages, s.page_bytes, s.layers, s.kv_heads, s.max_seq_len, CompactionMode::kSequential));
    const PagePool& pool = sut.engines[0]->pool();
    const PageManagerModel model(s.pages, s.layers, s.kv_heads, pool.tokens_per_page(kHighTier),
                                 pool.tokens_per_page(kLowTier), s.max_seq_len);
    RC_TAG("tokens per page " + std::to_string(pool.tokens_per_page(0)) + "/" + std::to_string(pool.tokens_per_page(1)));
    check_all(model, sut);
    const auto commands = *at_least(kMinCommands, rc::state::gen::commands(
        model, rc::state::gen::execOneOfWithArgs<Admit, Prompt, Decode, Decode, Decode, Release, Repack, Share, Extend>()));
    g_counts.commands += static_cast<long>(commands.size());
    rc::state::runAll(commands, model, sut);
    g_counts.copies += sut.engines[0]->stats().cow_copies;
  });
  std::printf("commands generated %ld; prompt/decode/share outcomes: %ld ok, %ld pool exhausted, %ld table full, "
              "%ld rejected; %ld shares, %ld copy-on-write copies, %ld extends\n",
              g_counts.commands, g_counts.ok, g_counts.exhausted, g_counts.table_full, g_counts.rejected, g_counts.shares,
              g_counts.copies, g_counts.extends);
}

// A snapshot of what an engine holds, for "nothing changed".
struct Snapshot {
  std::vector<PageId> free;
  std::int64_t start = 0;
  std::vector<std::vector<PageId>> tables;
  std::vector<std::int64_t> live;
  bool operator==(const Snapshot&) const = default;
};
Snapshot snapshot(const UnifiedPageManager& e) {
  Snapshot s;
  s.free = e.free_list().free_ids();
  s.start = e.free_list().start_position();
  for (std::int64_t id : e.requests()) {
    for (std::int32_t l = 0; l < e.config().layers; ++l) {
      for (std::int32_t h = 0; h < e.config().kv_heads; ++h) {
        const std::span<const PageId> t = e.table(id, l, h).entries();
        s.tables.emplace_back(t.begin(), t.end());
        s.live.push_back(e.live_tokens(id, l, h, 0));
        s.live.push_back(e.live_tokens(id, l, h, 1));
      }
    }
  }
  return s;
}

TEST(UnifiedPagesProps, ExhaustionChangesNothingAndPreemptionMakesRoom) {
  check_property("unified pages: exhaustion, then preempt and retry", 200, [] {
    const PoolSetup s0 = draw_setup();
    const auto mode = *rc::gen::element(CompactionMode::kParallel, CompactionMode::kSequential);
    // A pool that holds at least one whole request.
    PageManagerConfig probe = make_config(8, s0.page_bytes, s0.layers, s0.kv_heads, s0.max_seq_len, mode);
    const std::int64_t per_request = s0.layers * s0.kv_heads * UnifiedPageManager(probe).table_length();
    const std::int64_t pages = per_request + *rc::gen::inRange<std::int64_t>(0, 3 * per_request);
    UnifiedPageManager e(make_config(pages, s0.page_bytes, s0.layers, s0.kv_heads, s0.max_seq_len, mode));
    std::int64_t id = 0;
    for (;; ++id) {
      RC_ASSERT(id < 1000);
      PromptRequest p;
      p.request = id;
      p.prompt_len = *rc::gen::inRange<std::int64_t>(1, s0.max_seq_len + 1);
      for (std::int64_t h = 0; h < e.heads_per_request(); ++h) {
        const std::int64_t high = *rc::gen::inRange<std::int64_t>(1, p.prompt_len + 1);  // holds a page
        p.heads.push_back({high, *rc::gen::inRange<std::int64_t>(0, p.prompt_len - high + 1), {}, {}});
      }
      e.admit(id);
      const Snapshot before = snapshot(e);
      const std::vector<PromptRequest> batch{p};
      try {
        e.prompt_phase(batch);
      } catch (const PoolExhausted& x) {
        RC_ASSERT(snapshot(e) == before);
        RC_ASSERT(x.available() == e.free_list().free_count());
        // Preempt the oldest requests until the prompt fits.
        for (std::int64_t victim : e.requests()) {
          if (victim == id) continue;
          e.preempt(victim);
          try {
            e.prompt_phase(batch);
            RC_SUCCEED("prompt phase fitted after preemption");
          } catch (const PoolExhausted&) {
          }
        }
        RC_FAIL("prompt phase of one request did not fit an empty pool that holds a whole request");
      }
    }
  });
}

}  // namespace
}  // namespace kvcheck
