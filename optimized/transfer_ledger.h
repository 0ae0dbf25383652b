// The transfer ledger of a resident backend (docs/design.md §15): every byte that crosses between
// the host and the backend's memory, by direction and kind, since the backend was made and since
// the last begin_step. A device backend counts its cudaMemcpy calls here; the host twin
// (optimized/host_twin_backend.h), whose "device" is the host, counts the same calls, so the
// gate checks what a decode step would move on a device: no KV byte, and O(batch + changed
// page-table rows) of everything else (HostTwinProps.*).
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace kvcheck {

enum class Transfer : int {
  kWeights,       // a weight, norm or table, uploaded once as stored
  kTokens,        // the batch's token ids
  kPositions,     // the batch's positions
  kRows,          // per-row request ids, and the rows whose logits are asked for
  kTables,        // changed page-table rows (deltas)
  kWriteTargets,  // the reserved slot of each (row, layer, kv head) for the new token's key and value
  kLogits,        // logits back to the host
  kDecisions,     // what a selecting policy reads on the host to decide (positions and scores of live tokens)
  kKv,            // key or value bytes: codes, or rows of keys and values
  kPlan,          // decode attention's descriptors (pages, heads, splits), made on the host per call
  kTrace,         // what a verification hook (RunnerTrace) reads: not part of a step's traffic
};
inline constexpr int kTransferKinds = 11;
const char* transfer_name(Transfer kind);

enum class Direction : int { kToDevice, kToHost };

struct TransferCounts {
  std::array<std::int64_t, kTransferKinds> to_device{}, to_host{};
  std::int64_t of(Direction d, Transfer kind) const {
    return (d == Direction::kToDevice ? to_device : to_host)[static_cast<std::size_t>(kind)];
  }
  // Every kind but kTrace.
  std::int64_t step_bytes(Direction d) const;
  // "tokens 8 H2D, logits 160 D2H, ..." (kinds with bytes only).
  std::string summary() const;
};

class TransferLedger {
 public:
  void add(Direction d, Transfer kind, std::int64_t bytes);
  // Starts a new step: step() counts from here.
  void begin_step() { step_ = {}; }
  const TransferCounts& step() const { return step_; }
  const TransferCounts& total() const { return total_; }

 private:
  TransferCounts step_, total_;
};

}  // namespace kvcheck
