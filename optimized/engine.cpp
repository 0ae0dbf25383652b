#include "optimized/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>
#include <utility>

#include "optimized/cpu_backend.h"
#include "optimized/cuda_backend.h"
#include "optimized/host_twin_backend.h"
#include "optimized/greedy_decoding.h"
#include "reference/errors.h"

namespace kvcheck {

std::unique_ptr<Engine> make_engine(const ReferenceModel& model, const EngineOptions& options) {
  return make_engine(model, options, make_policy(options.policy));
}

std::unique_ptr<Engine> make_engine(const ReferenceModel& model, const EngineOptions& options,
                                    std::unique_ptr<KvPolicy> policy) {
  if (!policy) throw std::invalid_argument("make_engine: null policy");
  if (options.device != "cpu" && options.device != "cuda" && options.device != "host-twin") {
    throw InputError(fmt::format("--device '{}': expected cpu or cuda", options.device));
  }
  auto e = std::make_unique<Engine>();
  // The backend first: a missing device is named before the weights are converted.
  // host-twin: the device-resident path over host memory (docs/design.md §15), for tests.
  if (options.device == "cuda") e->backend = std::make_unique<CudaBackend>();
  else if (options.device == "host-twin") e->backend = std::make_unique<HostTwinBackend>(options.threads);
  else e->backend = std::make_unique<CpuBackend>(options.threads);
  e->policy = std::move(policy);
  {
    const ModelConfig& c = model.config();
    e->policy->bind_engine(c.num_hidden_layers, c.num_key_value_heads, c.head_dim, options.page_bytes);
  }
  e->weights = load_engine_weights(model);
  PagedKvCacheConfig cache;
  cache.page_bytes = options.page_bytes;
  cache.poison = options.poison;
  cache.pages = options.pages;
  if (cache.pages <= 0) {
    // Pages for batch_hint requests at full context, within the memory budget.
    const ModelConfig& c = model.config();
    // Every tier of the policy may fill pages of its own, plus one page per head.
    const std::int64_t per_request =
        request_pages(c, e->policy->tiers(), options.page_bytes, c.max_position_embeddings) +
        c.num_hidden_layers * c.num_key_value_heads;
    cache.pages = std::max<std::int64_t>(1, std::min(per_request * options.batch_hint,
                                                     options.memory_budget / options.page_bytes));
  }
  e->cache = std::make_unique<PagedKvCache>(model.config(), *e->policy, cache);
  e->runner = std::make_unique<ModelRunner>(e->weights, *e->backend, *e->cache);
  return e;
}

EngineGenerateResult engine_generate(Engine& engine, std::int64_t request, std::span<const std::int32_t> prompt,
                                     const EngineGenerateOptions& options) {
  const ModelConfig& c = engine.weights.config;
  const auto V = static_cast<std::size_t>(c.vocab_size);
  EngineGenerateResult r;
  const auto stop_reason = [&] {
    return greedy_stop(c, static_cast<std::int64_t>(prompt.size()), r.generated, options.max_new_tokens,
                              options.stop_at_eos);
  };
  if (options.prefill) options.prefill->check_prompt(request, prompt);
  try {
    std::vector<float> last;
    std::optional<StopReason> reason = stop_reason();
    const bool keep_rows = options.keep_logits || options.keep_step_logits;
    if (!reason || keep_rows) {
      std::vector<float>* all_logits = options.keep_logits ? &r.logits : nullptr;
      last = options.prefill ? engine.runner->prefill_from_capture(request, prompt, *options.prefill, all_logits)
                             : engine.runner->prefill(request, prompt, all_logits);
      if (options.keep_step_logits && !options.keep_logits) r.logits.assign(last.begin(), last.begin() + static_cast<std::ptrdiff_t>(V));
    }
    while (!reason) {
      const std::int64_t position = static_cast<std::int64_t>(prompt.size() + r.generated.size());
      const std::int32_t greedy = greedy_token(request, last, position - 1);
      const std::size_t step = r.generated.size();
      const std::int32_t next = step < options.forced.size() ? options.forced[step] : greedy;
      r.greedy.push_back(greedy);
      r.generated.push_back(next);
      reason = stop_reason();
      if (reason && !keep_rows) break;
      const std::int64_t ids[1] = {request};
      const std::int32_t pos = static_cast<std::int32_t>(position);
      last = engine.runner->decode(ids, {&next, 1}, {&pos, 1});
      if (keep_rows) r.logits.insert(r.logits.end(), last.begin(), last.begin() + static_cast<std::ptrdiff_t>(V));
    }
    r.stop_reason = *reason;
  } catch (...) {
    engine.cache->release(request);
    throw;
  }
  engine.cache->release(request);
  return r;
}

}  // namespace kvcheck
