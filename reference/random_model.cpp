#include "reference/random_model.h"

#include <cmath>
#include <fstream>
#include <numbers>
#include <vector>

#include "reference/errors.h"
#include "reference/safetensors.h"
#include "reference/weights.h"

namespace kvcheck {

std::uint64_t fnv1a64(std::string_view s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char ch : s) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ULL;
  }
  return h;
}

namespace {

// SplitMix64: tiny, portable, and good enough for weights.
class SplitMix64 {
 public:
  explicit SplitMix64(std::uint64_t seed) : state_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1): 53 random bits, never 0.
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // Standard normal by Box-Muller (one value per call, the cosine branch).
  double normal() {
    const double u1 = uniform();
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::uint64_t state_;
};

std::vector<float> draw(std::uint64_t seed, const std::string& name, std::int64_t n, double mean, double stddev) {
  SplitMix64 rng(seed ^ fnv1a64(name));
  std::vector<float> out(static_cast<std::size_t>(n));
  for (float& x : out) x = static_cast<float>(mean + stddev * rng.normal());
  return out;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

TensorMap make_random_weights(const ModelConfig& config, DType dtype, std::uint64_t seed) {
  validate_config(config, "make_random_weights");
  TensorMap map;
  for (const ExpectedTensor& e : expected_tensors(config)) {
    std::int64_t n = 1;
    for (const std::int64_t d : e.shape) n *= d;
    double mean = 0.0;
    double stddev = 0.0;
    if (ends_with(e.name, "norm.weight")) {
      mean = 1.0;
      stddev = 0.1;
    } else if (ends_with(e.name, ".bias")) {
      stddev = 0.02;
    } else if (e.name == "model.embed_tokens.weight") {
      stddev = 1.0;
    } else {
      stddev = 1.0 / std::sqrt(static_cast<double>(e.shape.back()));  // 1/sqrt(in_features)
    }
    const std::vector<float> values = draw(seed, e.name, n, mean, stddev);
    map.add_float(e.name, dtype, e.shape, values);
  }
  return map;
}

void write_model(const std::filesystem::path& dir, const ModelConfig& config, const TensorSource& weights,
                 const std::optional<std::filesystem::path>& tokenizer) {
  validate_config(config, (dir / "config.json").string());
  check_tensors(config, weights, "weights for " + dir.string());
  std::filesystem::create_directories(dir);
  if (tokenizer) {
    if (!std::filesystem::is_regular_file(*tokenizer)) {
      throw input_error(tokenizer->string(), "tokenizer", "no such file");
    }
    std::filesystem::copy_file(*tokenizer, dir / "tokenizer.model", std::filesystem::copy_options::overwrite_existing);
  }
  write_safetensors(dir / "model.safetensors", weights, {{"format", "pt"}});
  const std::filesystem::path config_path = dir / "config.json";
  std::ofstream out(config_path, std::ios::trunc);
  out << config_to_json(config).dump(2) << "\n";
  if (!out) throw std::runtime_error("cannot write " + config_path.string());
}

}  // namespace kvcheck
