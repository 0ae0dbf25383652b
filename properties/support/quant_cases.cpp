#include "properties/support/quant_cases.h"

#include <algorithm>
#include <cmath>

#include "reference/tensor.h"

namespace kvcheck::testing {

const char* value_dist_name(ValueDist dist) {
  switch (dist) {
    case ValueDist::kNormal: return "normal";
    case ValueDist::kOutlierChannels: return "outlier-channels";
    case ValueDist::kUniform: return "uniform";
    case ValueDist::kConstant: return "constant";
    case ValueDist::kTiny: return "tiny";
    case ValueDist::kHuge: return "huge";
    case ValueDist::kSignedZeros: return "signed-zeros";
  }
  return "?";
}

std::vector<QuantSpec> all_int_specs() {
  std::vector<QuantSpec> out;
  for (const int bits : {8, 4, 2}) {
    out.push_back(per_token(bits));
    for (const int G : {16, 32, 128}) out.push_back(per_channel(bits, G));
    out.push_back(per_token_group(bits, 32));
  }
  return out;
}

namespace {

struct Lcg {
  std::uint64_t state;
  double uniform() {  // [0, 1)
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(state >> 11) * 0x1.0p-53;
  }
  double normal() {  // Box-Muller
    const double u = 1.0 - uniform(), v = uniform();
    return std::sqrt(-2.0 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

}  // namespace

std::vector<float> make_values(ValueDist dist, std::int64_t tokens, std::int64_t head_dim, std::uint64_t seed) {
  Lcg rng{seed ^ 0x9E3779B97F4A7C15ULL};
  std::vector<float> x(static_cast<std::size_t>(tokens * head_dim));
  switch (dist) {
    case ValueDist::kNormal:
      for (float& v : x) v = static_cast<float>(rng.normal());
      break;
    case ValueDist::kOutlierChannels: {
      std::vector<double> channel_scale(static_cast<std::size_t>(head_dim), 1.0);
      const int outliers = 1 + static_cast<int>(rng.uniform() * 4);
      for (int k = 0; k < outliers; ++k) {
        channel_scale[static_cast<std::size_t>(rng.uniform() * static_cast<double>(head_dim))] = 10.0 + 90.0 * rng.uniform();
      }
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double t = rng.normal() / std::sqrt(std::max(rng.uniform(), 1e-3));  // heavy tail
        x[i] = static_cast<float>(t * channel_scale[i % static_cast<std::size_t>(head_dim)]);
      }
      break;
    }
    case ValueDist::kUniform: {
      const double center = (rng.uniform() * 2.0 - 1.0) * std::pow(10.0, rng.uniform() * 4.0 - 1.0);
      const double width = std::pow(10.0, rng.uniform() * 5.0 - 4.0);
      for (float& v : x) v = static_cast<float>(center + width * (rng.uniform() * 2.0 - 1.0));
      break;
    }
    case ValueDist::kConstant: {
      const double pick = rng.uniform();
      float c = static_cast<float>(rng.normal() * std::pow(10.0, rng.uniform() * 6.0 - 3.0));
      if (pick < 0.4) c = f16_bits_to_float(float_to_f16_bits(c));  // an fp16 number: exact
      else if (pick < 0.5) c = 0.0f;
      else if (pick < 0.6) c = -0.0f;
      std::fill(x.begin(), x.end(), c);
      break;
    }
    case ValueDist::kTiny: {
      const double scale = std::pow(10.0, -3.0 - rng.uniform() * 40.0);  // down to 1e-43: subnormal floats
      for (float& v : x) v = static_cast<float>(rng.normal() * scale);
      break;
    }
    case ValueDist::kHuge: {
      // Up to the fp16 limit below zero (the zero point is fp16) and to 65504 * 3 above it (within
      // what a 2-bit fp16 scale covers, so every format accepts the block).
      const double scale = std::pow(10.0, 2.5 + rng.uniform() * 2.5);
      for (float& v : x) v = static_cast<float>(std::clamp(rng.normal() * scale, -65504.0, 65504.0 * 2.0));
      break;
    }
    case ValueDist::kSignedZeros:
      for (float& v : x) {
        const double u = rng.uniform();
        v = u < 0.45 ? 0.0f : u < 0.9 ? -0.0f : static_cast<float>(rng.normal());
      }
      break;
  }
  return x;
}

}  // namespace kvcheck::testing
