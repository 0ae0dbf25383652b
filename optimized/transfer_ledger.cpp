#include "optimized/transfer_ledger.h"

#include <fmt/format.h>

#include <stdexcept>

namespace kvcheck {

const char* transfer_name(Transfer kind) {
  switch (kind) {
    case Transfer::kWeights: return "weights";
    case Transfer::kTokens: return "tokens";
    case Transfer::kPositions: return "positions";
    case Transfer::kRows: return "rows";
    case Transfer::kTables: return "tables";
    case Transfer::kWriteTargets: return "write targets";
    case Transfer::kLogits: return "logits";
    case Transfer::kDecisions: return "decisions";
    case Transfer::kKv: return "kv";
    case Transfer::kPlan: return "plan";
    case Transfer::kTrace: return "trace";
  }
  return "?";
}

std::int64_t TransferCounts::step_bytes(Direction d) const {
  std::int64_t n = 0;
  for (int k = 0; k < kTransferKinds; ++k) {
    if (static_cast<Transfer>(k) != Transfer::kTrace) n += of(d, static_cast<Transfer>(k));
  }
  return n;
}

std::string TransferCounts::summary() const {
  std::string s;
  for (int k = 0; k < kTransferKinds; ++k) {
    for (const Direction d : {Direction::kToDevice, Direction::kToHost}) {
      const std::int64_t n = of(d, static_cast<Transfer>(k));
      if (n == 0) continue;
      s += fmt::format("{}{} {} {}", s.empty() ? "" : ", ", transfer_name(static_cast<Transfer>(k)), n,
                       d == Direction::kToDevice ? "H2D" : "D2H");
    }
  }
  return s.empty() ? "nothing" : s;
}

void TransferLedger::add(Direction d, Transfer kind, std::int64_t bytes) {
  if (bytes < 0) throw std::invalid_argument("transfer ledger: negative bytes");
  const auto k = static_cast<std::size_t>(kind);
  (d == Direction::kToDevice ? step_.to_device : step_.to_host)[k] += bytes;
  (d == Direction::kToDevice ? total_.to_device : total_.to_host)[k] += bytes;
}

}  // namespace kvcheck
