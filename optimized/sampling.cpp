#include "optimized/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "optimized/greedy_decoding.h"
#include "optimized/seeded_draws.h"
#include "reference/errors.h"

namespace kvcheck {

double sampling_draw(std::uint64_t seed, std::int64_t sample, std::int64_t position) {
  const std::uint64_t key = splitmix64(splitmix64(splitmix64(seed) ^ static_cast<std::uint64_t>(sample)) ^
                                       static_cast<std::uint64_t>(position));
  return static_cast<double>(key >> 11) * 0x1.0p-53;
}

std::int32_t sample_token(std::int64_t request, std::span<const float> logits, std::int64_t position,
                          const SamplingParams& params, std::int64_t sample) {
  if (params.temperature == 0.0) return greedy_token(request, logits, position);
  double top = -INFINITY;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    if (!std::isfinite(logits[i])) {
      throw InputError(fmt::format("request {}: logit {} at position {} is {} (sampling needs finite logits)", request,
                                   i, position, logits[i]));
    }
    top = std::max(top, static_cast<double>(logits[i]));
  }
  std::vector<double> p(logits.size());
  for (std::size_t i = 0; i < logits.size(); ++i) {
    p[i] = std::exp((static_cast<double>(logits[i]) - top) / params.temperature);
  }
  std::vector<std::int32_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return p[static_cast<std::size_t>(a)] > p[static_cast<std::size_t>(b)];
  });
  const double total = std::accumulate(p.begin(), p.end(), 0.0);
  // The nucleus: the shortest head of the order whose mass reaches top_p of the total.
  std::size_t kept = 0;
  double mass = 0.0;
  while (kept < order.size() && (kept == 0 || mass < params.top_p * total)) {
    mass += p[static_cast<std::size_t>(order[kept++])];
  }
  const double u = sampling_draw(params.seed, sample, position) * mass;
  double running = 0.0;
  for (std::size_t i = 0; i < kept; ++i) {
    running += p[static_cast<std::size_t>(order[i])];
    if (u < running) return order[i];
  }
  return order[kept - 1];  // u within rounding of the kept mass
}

}  // namespace kvcheck
