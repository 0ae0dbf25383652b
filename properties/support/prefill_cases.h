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

PrefillCase draw_prefill_case();

// Relative float tolerance of head h's outputs and column sums (derivation in prefill_cases.cpp);
// it grows with the number of online-softmax rescales, tokens / in.tile + 1.
double prefill_head_tolerance(const PrefillCase& c, std::int64_t h);

}  // namespace kvcheck::testing
