// One optimized engine, assembled: float weights, a backend, a paged KV cache in a policy's
// formats, the model runner over them, and greedy generation without the scheduler (for
// `kvcheck generate` and `kvcheck verify`, which run one request at a time).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "optimized/backend.h"
#include "optimized/engine_weights.h"
#include "optimized/greedy_decoding.h"
#include "optimized/kv_policy.h"
#include "optimized/model_runner.h"
#include "optimized/paged_kv_cache.h"
#include "reference/model.h"

namespace kvcheck {

struct EngineOptions {
  std::string device = "cpu";        // "cpu", or "cuda" (optimized/cuda_backend.h: needs a CUDA build and device);
                                     // "host-twin" (tests: optimized/host_twin_backend.h)
  std::string policy = "full-fp32";
  std::int64_t pages = 0;            // 0: room for `batch_hint` requests at full context, within memory_budget
  std::int64_t page_bytes = 16 * 1024;
  std::int64_t batch_hint = 32;
  std::int64_t memory_budget = std::int64_t{1} << 30;  // bytes of pages when pages is 0
  int threads = 0;                   // 0: every core
  bool poison = false;
};

struct Engine {
  EngineWeights weights;
  std::unique_ptr<KvPolicy> policy;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<PagedKvCache> cache;
  std::unique_ptr<ModelRunner> runner;
};

// InputError for an unknown device or policy, or a config the engine does not run.
std::unique_ptr<Engine> make_engine(const ReferenceModel& model, const EngineOptions& options);
// The same with a policy object instead of options.policy (tests plant bugs in policies this way).
std::unique_ptr<Engine> make_engine(const ReferenceModel& model, const EngineOptions& options,
                                    std::unique_ptr<KvPolicy> policy);

struct EngineGenerateOptions {
  std::int64_t max_new_tokens = 16;
  bool stop_at_eos = true;
  bool keep_logits = false;                      // every row, as reference/generate.h's GenerateResult
  // The last prompt position's row and every decode step's, [1 + generated][vocab]: what a
  // comparison of the continuation needs, without the lm_head over every prompt row. The steps run
  // as with keep_logits (the last fed token decoded too).
  bool keep_step_logits = false;
  std::span<const std::int32_t> forced;          // teacher forcing: feed these instead of the argmax
  // Start from a shared prefill (ModelRunner::capture_prefill of this prompt) instead of computing
  // it: the same bits as without it (ModelRunner::prefill_from_capture). Not owned; must outlive
  // the call. std::invalid_argument naming the request when it is another prompt's; logic_error
  // when the engine's policy cannot start from it (its scores or window not captured) or
  // keep_logits asks every position's logits of a capture without them.
  const PrefillCapture* prefill = nullptr;
};

struct EngineGenerateResult {
  std::vector<std::int32_t> generated;  // the tokens fed after the prompt (forced or greedy)
  std::vector<std::int32_t> greedy;     // the engine's argmax at each of those steps
  std::vector<float> logits;            // keep_logits: [prompt + generated][vocab], as the reference's;
                                        // keep_step_logits: [1 + generated][vocab]
  StopReason stop_reason = StopReason::kMaxNewTokens;
};

// Greedy decoding of one request (id `request`) with the reference's stop rules (EOS, then
// max_new_tokens, then max_position_embeddings). The request's pages are freed at the end.
EngineGenerateResult engine_generate(Engine& engine, std::int64_t request, std::span<const std::int32_t> prompt,
                                     const EngineGenerateOptions& options);

// One request of engine_generate_batch: its id (distinct within the batch), prompt and options.
struct EngineGenerateRequest {
  std::int64_t request = 0;
  std::span<const std::int32_t> prompt;
  EngineGenerateOptions options;
};
// engine_generate of several requests at once: each prefilled in turn, then decoded together, one
// ModelRunner::decode per step over every request still running (each one row of the batch), so
// the weights are read once per step for all of them. The runner is batch-invariant, so each
// result is engine_generate's for that request alone, bit for bit. The pool must hold every
// request at once (PoolExhausted otherwise); every request's pages are freed at the end, on an
// exception too.
std::vector<EngineGenerateResult> engine_generate_batch(Engine& engine, std::span<const EngineGenerateRequest> requests);

}  // namespace kvcheck
