// The held set of one decode head as the per-step oracle (oracles/engine_step_oracle.h) checks
// it, and the builders that shape it per policy feature. The oracle's core derives the held rows
// the plain way (oracles/held_rows_ref.h: HeldRowsSpec over the exact rows and the held tokens);
// a policy feature that changes what is held, how it is stored or the space the check runs in is
// a builder here, with two stages around that derivation:
//
//   before_rows  the spec and the rows the derivation reads (FP8 scales; a rotation's space);
//   after_rows   the held set and its rows once derived (a rotation's output rounding; Quest's
//                page choice checked and the held set cut to the pages read).
//
// Builders run in the order of held_set_builders(), each only for a policy it applies to. A new
// policy feature adds a builder; the core loop does not change.
//
// Library kvcheck_engine_oracle: it reads the engine's policy and cache, like the oracle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "optimized/engine.h"
#include "oracles/held_rows_ref.h"

namespace kvcheck {

// One decode head's check as the builders and the core make it.
// Rows a builder derives from the head's exact rows, one row at a time (a rotation), kept from
// check to check by the oracle's held-row memo (EngineStepOracle::set_held_rows_memo): a row is
// derived again only when its input differs, bit for bit, from the one it was derived from, so a
// decode step derives its new row instead of the whole context.
class DerivedRowsMemo {
 public:
  // rows [n][width] <- derive(rows), where derive maps each row on its own (rows [m][width] in
  // place); only the rows not derived before from the same bits go through it.
  void map(std::vector<float>& rows, std::int64_t width, const std::function<void(std::vector<float>& rows)>& derive);

 private:
  std::int64_t width_ = 0;
  std::vector<char> valid_;          // [row]
  std::vector<float> in_, out_;      // [row][width]: the input rows and what they gave
};

struct HeldSet {
  std::span<const SlotRef> slots;   // the head's live slots, in walk order
  std::vector<std::size_t> order;   // indices into slots, by ascending position
  HeldRowsSpec spec;
  std::vector<float> q, out;        // [group][head_dim]: the query and the engine's output, in the check's space
  std::vector<float> keys, values;  // [context][head_dim]: exact rows, in the check's space
  // [context][head_dim]: the rows the cache quantized, when a builder says they differ from
  // keys and values (empty: they are keys and values).
  std::vector<float> stored_keys, stored_values;
  std::vector<HeldToken> tokens;             // the held tokens, by ascending position
  std::vector<std::int32_t> held;            // their positions
  std::vector<float> held_keys, held_values;  // [held][head_dim]: as stored, dequantized
  double output_rounding = 0.0;     // rounding of the engine's output beyond the attention's own
  std::string selection_violation;  // a page-selecting policy's wrong choice, or empty
  // The exact keys' and values' derived rows from earlier checks of this head, or null (derive
  // every row).
  DerivedRowsMemo* derived_keys = nullptr;
  DerivedRowsMemo* derived_values = nullptr;
};

struct HeldSetBuilder {
  const char* feature;
  bool (*applies)(const KvPolicy& policy);
  // Either may be null.
  void (*before_rows)(Engine& engine, const DecodeHeadTrace& step, HeldSet& set);
  void (*after_rows)(Engine& engine, const DecodeHeadTrace& step, HeldSet& set);
};

// FP8 scales (calibrated, per page), a Hadamard rotation, page selection (Quest): in this order.
std::span<const HeldSetBuilder> held_set_builders();

}  // namespace kvcheck
