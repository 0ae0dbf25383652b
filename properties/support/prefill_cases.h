// Random causal prefill-attention cases for the kernel properties (CPU twin) and the GPU parity
// tests: lengths 1..300, GQA layouts, head sizes, tiles and observation windows, keys scaled for
// flat to sharp softmaxes; and the float tolerance of a kernel against the double oracle. Call
// inside a RapidCheck property (draws use rc::gen).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/cpu/prefill_attention.h"
#include "properties/support/float_eps.h"

namespace kvcheck::testing {

struct PrefillCase {
  PrefillAttentionInput in;
  std::vector<float> q, k, v;
  std::string summary;
};

// head_dims: the head sizes drawn from (the ISA properties add whole-lane sizes up to 128).
PrefillCase draw_prefill_case(const std::vector<std::int64_t>& head_dims = {4, 8, 16, 32});

// Relative float tolerance of head h's outputs and column sums (derivation in prefill_cases.cpp);
// it grows with the number of online-softmax rescales, tokens / in.tile + 1.
double prefill_head_tolerance(const PrefillCase& c, std::int64_t h);

}  // namespace kvcheck::testing
