#include "bench/serving_workload.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <fstream>
#include <nlohmann/json.hpp>
#include <cmath>
#include <random>
#include <set>
#include <sstream>

#include "optimized/seeded_draws.h"
#include "reference/errors.h"

namespace kvcheck {

namespace {

constexpr std::array<const char*, 4> kNames = {"chat", "reasoning", "long-context", "shared-prefix"};
constexpr double kSigma = 0.8;

// The longest output that still fits beside `prompt` (at least 1: prompts leave a token free).
std::int64_t room(const ServingWorkloadConfig& c, std::int64_t prompt) { return c.max_context - prompt; }

}  // namespace

std::span<const char* const> serving_workload_names() { return kNames; }

std::vector<ServingRequest> make_serving_workload(const ServingWorkloadConfig& c) {
  if (std::find_if(kNames.begin(), kNames.end(), [&](const char* n) { return c.name == n; }) == kNames.end()) {
    throw input_error("--workload", c.name, "unknown workload; expected one of chat, reasoning, long-context, "
                                            "shared-prefix (or --workload-file FILE)");
  }
  if (c.requests < 1) throw input_error("--requests", std::to_string(c.requests), "must be at least 1");
  if (c.max_context < 16) {
    throw input_error("max_position_embeddings", std::to_string(c.max_context),
                      "a serving workload needs a context of at least 16 tokens");
  }
  if (c.reasoning_cap < 2) throw input_error("--reasoning-cap", std::to_string(c.reasoning_cap), "must be >= 2");
  std::uint64_t name_hash = 0xcbf29ce484222325ULL;  // FNV-1a: the same on every standard library
  for (const char ch : c.name) name_hash = (name_hash ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
  std::mt19937_64 rng(splitmix64(c.seed ^ name_hash));
  std::vector<ServingRequest> out(static_cast<std::size_t>(c.requests));
  const std::int64_t prefix = c.max_context / 4;
  for (std::size_t i = 0; i < out.size(); ++i) {
    ServingRequest& r = out[i];
    r.id = static_cast<std::int64_t>(i);
    if (c.name == "chat") {
      r.prompt_tokens = lognormal_draw(rng, 224.7, kSigma, 1, c.max_context - 1);
      r.output_tokens = lognormal_draw(rng, 208.9, kSigma, 1, room(c, r.prompt_tokens));
    } else if (c.name == "reasoning") {
      r.prompt_tokens = lognormal_draw(rng, 64.0, kSigma, 1, c.max_context / 4);
      const std::int64_t cap = std::min(c.reasoning_cap, room(c, r.prompt_tokens));
      r.output_tokens = lognormal_draw(rng, 0.75 * static_cast<double>(cap), 0.3, 1, cap);
    } else if (c.name == "long-context") {
      const double share = 0.6 + 0.3 * unit_draw(rng);
      r.prompt_tokens = std::clamp<std::int64_t>(std::llround(share * static_cast<double>(c.max_context)), 1,
                                                 c.max_context - 1);
      r.output_tokens = lognormal_draw(rng, 24.0, kSigma, 1, std::min<std::int64_t>(64, room(c, r.prompt_tokens)));
    } else {  // shared-prefix
      r.shared_prefix_tokens = prefix;
      r.prompt_tokens = prefix + lognormal_draw(rng, 32.0, kSigma, 1, c.max_context / 4);
      r.output_tokens = lognormal_draw(rng, 64.0, kSigma, 1, room(c, r.prompt_tokens));
    }
  }
  if (c.rate < 0.0) throw input_error("--rate", fmt::format("{}", c.rate), "must be >= 0 (0: all at once)");
  assign_arrivals(out, c.rate, c.seed);
  return out;
}

void assign_arrivals(std::vector<ServingRequest>& requests, double rate, std::uint64_t seed) {
  std::mt19937_64 rng(splitmix64(seed ^ 0x617272697661ULL));
  double t = 0.0;
  for (ServingRequest& r : requests) {
    if (rate > 0.0) t += exponential_draw(rng, rate);
    r.arrival_s = t;
  }
}

std::vector<ServingRequest> parse_serving_workload(const std::string& text, const std::string& source,
                                                   std::int64_t max_context, std::int64_t vocab_size) {
  std::vector<ServingRequest> out;
  std::set<std::int64_t> ids;
  std::istringstream in(text);
  std::string line;
  std::int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", source, number);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw input_error(where, "json", "{}", e.what());
    }
    if (!j.is_object()) throw input_error(where, "json", "expected an object per line");
    auto integer = [&](const char* field, std::int64_t fallback, bool required) -> std::int64_t {
      if (!j.contains(field)) {
        if (required) throw input_error(where, field, "missing");
        return fallback;
      }
      const nlohmann::json& v = j[field];
      if (!v.is_number_integer()) throw input_error(where, field, "expected an integer, got {}", v.dump());
      return v.get<std::int64_t>();
    };
    ServingRequest r;
    r.id = integer("id", static_cast<std::int64_t>(out.size()), false);
    if (!ids.insert(r.id).second) throw input_error(where, "id", "request id {} appears twice", r.id);
    if (j.contains("arrival_s")) {
      const nlohmann::json& v = j["arrival_s"];
      if (!v.is_number() || !(v.get<double>() >= 0.0) || !std::isfinite(v.get<double>())) {
        throw input_error(where, "arrival_s", "expected a finite number >= 0, got {}", v.dump());
      }
      r.arrival_s = v.get<double>();
    }
    r.output_tokens = integer("output_tokens", 0, true);
    if (r.output_tokens < 1) throw input_error(where, "output_tokens", "must be at least 1, got {}", r.output_tokens);
    if (j.contains("prompt_ids")) {
      if (j.contains("prompt_tokens")) throw input_error(where, "prompt_ids", "give prompt_ids or prompt_tokens, not both");
      const nlohmann::json& ids_json = j["prompt_ids"];
      if (!ids_json.is_array()) throw input_error(where, "prompt_ids", "expected an array of token ids");
      for (const nlohmann::json& t : ids_json) {
        if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() >= vocab_size) {
          throw input_error(where, "prompt_ids", "token {} is not an id in [0, {})", t.dump(), vocab_size);
        }
        r.prompt.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
      }
      r.prompt_tokens = static_cast<std::int64_t>(r.prompt.size());
    } else {
      r.prompt_tokens = integer("prompt_tokens", 0, true);
    }
    if (r.prompt_tokens < 1) throw input_error(where, "prompt_tokens", "a prompt needs at least 1 token");
    if (r.prompt_tokens + r.output_tokens > max_context) {
      throw input_error(where, "output_tokens", "prompt {} + output {} tokens exceed the model's context of {}",
                        r.prompt_tokens, r.output_tokens, max_context);
    }
    r.shared_prefix_tokens = integer("shared_prefix_tokens", 0, false);
    if (r.shared_prefix_tokens < 0 || r.shared_prefix_tokens > r.prompt_tokens) {
      throw input_error(where, "shared_prefix_tokens", "must be in [0, prompt length {}], got {}", r.prompt_tokens,
                        r.shared_prefix_tokens);
    }
    out.push_back(std::move(r));
  }
  if (out.empty()) throw input_error(source, "requests", "the workload file holds no request");
  return out;
}

std::vector<ServingRequest> load_serving_workload(const std::filesystem::path& file, std::int64_t max_context,
                                                  std::int64_t vocab_size) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw input_error(file.string(), "file", "cannot open the workload file");
  std::ostringstream text;
  text << in.rdbuf();
  return parse_serving_workload(text.str(), file.string(), max_context, vocab_size);
}

void save_serving_workload(const std::filesystem::path& file, std::span<const ServingRequest> requests) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  if (!out) throw input_error(file.string(), "file", "cannot write the workload file");
  for (const ServingRequest& r : requests) {
    nlohmann::json j = {{"id", r.id}, {"arrival_s", r.arrival_s}, {"output_tokens", r.output_tokens}};
    if (r.shared_prefix_tokens > 0) j["shared_prefix_tokens"] = r.shared_prefix_tokens;
    j["prompt_tokens"] = r.prompt_tokens;
    out << j.dump() << '\n';
  }
  if (!out) throw input_error(file.string(), "file", "write failed");
}

void fill_prompts(std::vector<ServingRequest>& requests, std::span<const std::int32_t> text, std::int32_t bos,
                  std::uint64_t seed) {
  if (text.size() < 2) throw InputError("serving workload: the text to cut prompts from is empty");
  std::mt19937_64 rng(splitmix64(seed ^ 0x70726f6d7074ULL));
  const auto n = static_cast<std::int64_t>(text.size());
  for (ServingRequest& r : requests) {
    if (!r.prompt.empty()) continue;
    if (bos >= 0) r.prompt.push_back(bos);
    // The shared prefix is the text's beginning, the same for every request; the rest of the
    // prompt starts at a random offset.
    const std::int64_t jump = std::max<std::int64_t>(r.shared_prefix_tokens, bos >= 0 ? 1 : 0);
    std::int64_t at = 0;
    while (static_cast<std::int64_t>(r.prompt.size()) < r.prompt_tokens) {
      if (static_cast<std::int64_t>(r.prompt.size()) == jump) {
        at = static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(n));
      }
      r.prompt.push_back(text[static_cast<std::size_t>(at % n)]);
      ++at;
    }
    r.prompt.resize(static_cast<std::size_t>(r.prompt_tokens));
  }
}

}  // namespace kvcheck
