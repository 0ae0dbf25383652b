// Seeded sampling of the next token (vLLM's temperature and top-p), for the scheduler's requests.
//
//   temperature 0   greedy: the first largest logit (optimized/greedy_decoding.h), the default;
//   temperature t   p_i = softmax(logits / t)_i, in double; the candidates sorted by p descending
//                   (ties: the lower id first); top_p keeps the shortest head of that order whose
//                   mass reaches top_p of the total (mass >= top_p x total: a head landing exactly
//                   on top_p is the nucleus; at least one token); a draw u in [0, 1) picks
//                   the first candidate whose running mass exceeds u times the kept mass.
//
// The draw is a function of (seed, sample, position) alone (splitmix64), not a stream: a request
// replayed after a preemption by recompute draws the same tokens, and sample k of a request with
// n continuations is the token sequence a one-sample request with first_sample k draws.
#pragma once

#include <cstdint>
#include <span>

namespace kvcheck {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;        // (0, 1]
  std::uint64_t seed = 0;
};

// The draw u in [0, 1) of (seed, sample, position).
double sampling_draw(std::uint64_t seed, std::int64_t sample, std::int64_t position);

// The token after `position`. InputError naming the request and position for a NaN logit (or an
// infinite one when sampling).
std::int32_t sample_token(std::int64_t request, std::span<const float> logits, std::int64_t position,
                          const SamplingParams& params, std::int64_t sample);

}  // namespace kvcheck
