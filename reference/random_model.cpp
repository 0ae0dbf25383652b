#include "reference/random_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <thread>
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
  // The state after n calls of next(): the state only ever adds the same constant.
  void skip(std::uint64_t n) { state_ += n * kGamma; }
  std::uint64_t next() {
    std::uint64_t z = (state_ += kGamma);
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
  static constexpr std::uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
  std::uint64_t state_;
};

// Values per chunk of `draw`. Chunk c starts from the generator skipped past the 2 * c * kDrawChunk
// draws before it, so every value is the one a single sequential pass gives, whatever the number
// of threads: the bytes stay portable while a 0.5B-parameter shape is drawn on every core.
constexpr std::int64_t kDrawChunk = 4096;

std::vector<float> draw(std::uint64_t seed, const std::string& name, std::int64_t n, double mean, double stddev) {
  const std::uint64_t tensor_seed = seed ^ fnv1a64(name);
  std::vector<float> out(static_cast<std::size_t>(n));
  const std::int64_t chunks = (n + kDrawChunk - 1) / kDrawChunk;
  std::atomic<std::int64_t> next{0};
  auto work = [&] {
    for (std::int64_t c = next.fetch_add(1); c < chunks; c = next.fetch_add(1)) {
      SplitMix64 rng(tensor_seed);
      rng.skip(2 * static_cast<std::uint64_t>(c * kDrawChunk));  // normal() takes two draws
      const std::int64_t end = std::min(n, (c + 1) * kDrawChunk);
      for (std::int64_t i = c * kDrawChunk; i < end; ++i) {
        out[static_cast<std::size_t>(i)] = static_cast<float>(mean + stddev * rng.normal());
      }
    }
  };
  // Threads only where there is work for them (a big embedding or projection).
  constexpr std::int64_t kChunksPerThread = 64;
  const auto threads = static_cast<std::int64_t>(
      std::min<std::int64_t>(std::max(1U, std::thread::hardware_concurrency()), chunks / kChunksPerThread));
  std::vector<std::thread> helpers;
  for (std::int64_t t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (std::thread& h : helpers) h.join();
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
