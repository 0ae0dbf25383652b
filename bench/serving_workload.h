// The workloads of the serving benchmark (`kvcheck bench --workload`): which requests arrive when,
// with how long a prompt and how many tokens to generate. Seeded and deterministic (the draws of
// optimized/seeded_draws.h), or read from a JSONL file.
//
// Workloads, for a model whose context holds max_context tokens (every request is clamped so that
// prompt + output <= max_context; the measured means are reported next to the asked ones):
//   chat           lognormal prompt and output lengths with ShareGPT's means (224.7 and 208.9
//                  tokens, as measured in SpvLLM section 3.2), shape sigma 0.8;
//   reasoning      short prompts (lognormal, mean 64) and long generations: lognormal with mean
//                  0.75 x cap, clamped to cap = min(reasoning_cap, max_context - prompt), as
//                  LeanKV's MATH workload (generations up to 4K-16K tokens; a small model's
//                  context caps them lower);
//   long-context   prompts uniform in [0.6, 0.9] x max_context, short answers (lognormal, mean 24);
//   shared-prefix  one system prompt of max_context / 4 tokens shared by every request, then a
//                  user turn (lognormal, mean 32) and an answer (lognormal, mean 64).
// Arrival: all at time 0 (rate 0), or a Poisson process with `rate` requests per second.
//
// JSONL (one request per line; `--save-workload` writes it, `--workload-file` reads it):
//   {"id": 0, "arrival_s": 0.0, "prompt_tokens": 120, "output_tokens": 200, "shared_prefix_tokens": 0}
// or with explicit ids instead of prompt_tokens: {"prompt_ids": [1, 523, ...], "output_tokens": 200}.
// `id` defaults to the line's index, `arrival_s` to 0, `shared_prefix_tokens` to 0 (the first
// that many tokens of the prompt are the workload's common prefix).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

namespace kvcheck {

struct ServingRequest {
  std::int64_t id = 0;
  double arrival_s = 0.0;
  std::int64_t prompt_tokens = 0;
  std::int64_t output_tokens = 0;
  std::int64_t shared_prefix_tokens = 0;  // leading prompt tokens common to the workload
  std::vector<std::int32_t> prompt;       // filled by fill_prompts, or given by the file
};

struct ServingWorkloadConfig {
  std::string name = "chat";  // chat | reasoning | long-context | shared-prefix
  std::int64_t requests = 64;
  std::uint64_t seed = 1;
  std::int64_t max_context = 512;
  std::int64_t reasoning_cap = 4096;
  double rate = 0.0;  // requests per second; 0: every request arrives at time 0
};

// The known workload names, in the order above.
std::span<const char* const> serving_workload_names();

// InputError (naming the option) for an unknown name, requests < 1, a context too short to hold
// a request, or a negative rate.
std::vector<ServingRequest> make_serving_workload(const ServingWorkloadConfig& config);

// Poisson arrivals with `rate` requests per second (seeded), or all at 0 when rate is 0.
void assign_arrivals(std::vector<ServingRequest>& requests, double rate, std::uint64_t seed);

// Reads a workload file. InputError naming the file, the line and the field for malformed JSON,
// missing or negative lengths, a prompt that does not fit max_context with its output, token ids
// outside [0, vocab_size), duplicate ids, or an empty file.
std::vector<ServingRequest> load_serving_workload(const std::filesystem::path& file, std::int64_t max_context,
                                                  std::int64_t vocab_size);
// Parses one JSONL text (the loader and the fuzz target share it); `source` names it in errors.
std::vector<ServingRequest> parse_serving_workload(const std::string& text, const std::string& source,
                                                   std::int64_t max_context, std::int64_t vocab_size);
// Writes the requests as JSONL (lengths and arrivals; prompt ids only where the file gave them).
void save_serving_workload(const std::filesystem::path& file, std::span<const ServingRequest> requests);

// Gives every request without ids a prompt cut from `text` (token ids of real text, at least a
// few hundred tokens): requests start at seeded offsets, and the shared prefix of a shared-prefix
// workload is the same text for all. `bos` (if >= 0) is the first token of every prompt.
void fill_prompts(std::vector<ServingRequest>& requests, std::span<const std::int32_t> text, std::int32_t bos,
                  std::uint64_t seed);

}  // namespace kvcheck
