// Draws from a seeded std::mt19937_64 that give the same numbers on every standard library (the
// std:: distributions are implementation-defined): the synthetic workloads of the fragmentation
// and serving benchmarks use these, so a seed names one workload everywhere.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>

namespace kvcheck {

// splitmix64: derived seeds (per request, per workload).
inline std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A uniform double in [0, 1) from 53 bits.
inline double unit_draw(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

// Lognormal with the given mean (mu = ln(mean) - sigma^2/2; Box-Muller for the normal), rounded
// and clamped to [lo, hi].
inline std::int64_t lognormal_draw(std::mt19937_64& rng, double mean, double sigma, std::int64_t lo,
                                   std::int64_t hi) {
  const double u1 = std::max(unit_draw(rng), 1e-300);
  const double u2 = unit_draw(rng);
  const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  const double x = std::exp(std::log(mean) - 0.5 * sigma * sigma + sigma * z);
  return std::clamp<std::int64_t>(std::llround(x), lo, hi);
}

// Exponential with the given rate (events per unit), by inversion.
inline double exponential_draw(std::mt19937_64& rng, double rate) {
  return -std::log(std::max(1.0 - unit_draw(rng), 1e-300)) / rate;
}

}  // namespace kvcheck
