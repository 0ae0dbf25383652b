// The per-step oracle of the compressed engine (docs/design.md §7, with the data flow of §3),
// for one decode step of one kv head and its group of query heads:
//
//   held   the engine's output must equal exact attention (double) over exactly the tokens the
//          policy claims to hold, dequantized as their format stores them, within the rounding
//          of the engine's float arithmetic (a bound derived from the inputs, below);
//   full   its distance from exact attention over every token of the context, with exact keys
//          and values, must stay within the analytic bound: quantization 2·tanh(δ/2)·max|v̂| +
//          max|v - v̂| (δ the largest logit change the dequantized keys cause) plus pruning
//          2·m·max|v| (m the attention mass, under exact attention, of the tokens not held),
//          plus the same float rounding.
//
// Errors and bounds are per output element (max-norms); each query head is held to its own tolerance and
// bound, and the fields report the maxima over the group. Everything here
// is double-precision arithmetic on plain spans: it knows nothing of pages or policies.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "kernels/kv_format.h"

namespace kvcheck {

// A row [head_dim] as `format` stores it, dequantized: oracles/held_rows_ref.h's stored_rows_ref
// of one row (fp32: itself; fp16: rounded to nearest even; INT per token or per token group).
// std::invalid_argument for FP8 (it needs its head's scale) and per-channel keys (groups of rows).
std::vector<float> stored_row_ref(const KvFormat& format, std::span<const float> row);

struct DecodeStepInputs {
  std::int64_t group = 1, head_dim = 0;
  double scale = 0.0;
  std::span<const float> q;             // [group][head_dim]
  std::span<const float> engine_out;    // [group][head_dim]
  std::span<const float> keys, values;  // [context][head_dim]: every token, exact
  std::span<const std::int32_t> held;   // indices into the context, ascending, at least one
  std::span<const float> held_keys, held_values;  // [held][head_dim]: as stored, dequantized
  // Float work on the output outside attention, per element, added to the tolerance: a rotating
  // policy's R^T back to the model's space and the oracle's R forward again (engine_step_oracle).
  double output_rounding = 0.0;
};

struct DecodeStepCheck {
  double held_error = 0.0;      // max |engine - exact attention over the held set|
  double held_tolerance = 0.0;  // the float rounding the engine may add
  double full_error = 0.0;      // max |engine - exact attention over the whole context|
  double full_bound = 0.0;      // quantization + pruning bound + held_tolerance
  double quant_bound = 0.0, prune_bound = 0.0;
  double pruned_mass = 0.0;     // max over the group
  double delta = 0.0;           // max logit change from dequantized keys
  bool held_violated = false;   // some query head's held error exceeds its own tolerance (or is NaN)
  bool full_violated = false;   // some query head's full error exceeds its own bound (or is NaN)
  bool ok() const { return !held_violated && !full_violated; }
  std::string describe() const;  // one line with every number above
};

// std::invalid_argument on inconsistent sizes, an empty or unsorted held list.
DecodeStepCheck check_decode_step(const DecodeStepInputs& in);

}  // namespace kvcheck
