#include "optimized/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <utility>

#include "optimized/cpu_backend.h"
#include "optimized/cuda_backend.h"
#include "optimized/cuda_resident_backend.h"
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
  if (options.device != "cpu" && options.device != "cuda" && options.device != "cuda-resident" &&
      options.device != "host-twin" && options.device != "host-twin-mirrored") {
    throw InputError(fmt::format("--device '{}': expected cpu, cuda or cuda-resident", options.device));
  }
  auto e = std::make_unique<Engine>();
  // The backend first: a missing device is named before the weights are converted.
  // host-twin(-mirrored): the device-resident path over host memory (docs/design.md §15), for tests.
  if (options.device == "cuda") e->backend = std::make_unique<CudaBackend>();
  else if (options.device == "cuda-resident") e->backend = std::make_unique<CudaResidentBackend>();
  else if (options.device == "host-twin") e->backend = std::make_unique<HostTwinBackend>(options.threads);
  else if (options.device == "host-twin-mirrored") {
    e->backend = std::make_unique<HostTwinBackend>(options.threads, HostTwinBackend::Pool::kMirrored);
  }
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

std::vector<EngineGenerateResult> engine_generate_batch(Engine& engine, std::span<const EngineGenerateRequest> requests) {
  const ModelConfig& c = engine.weights.config;
  const auto V = static_cast<std::size_t>(c.vocab_size);
  const std::size_t n = requests.size();
  std::vector<EngineGenerateResult> out(n);
  std::vector<std::vector<float>> last(n);
  std::vector<std::optional<StopReason>> reason(n);
  std::vector<bool> started(n, false);
  const auto stop_reason = [&](std::size_t i) {
    const EngineGenerateRequest& q = requests[i];
    return greedy_stop(c, static_cast<std::int64_t>(q.prompt.size()), out[i].generated, q.options.max_new_tokens,
                       q.options.stop_at_eos);
  };
  const auto keeps_rows = [&](std::size_t i) {
    return requests[i].options.keep_logits || requests[i].options.keep_step_logits;
  };
  for (std::size_t i = 0; i < n; ++i) {
    for (std::size_t j = 0; j < i; ++j) {
      if (requests[j].request == requests[i].request) {
        throw std::invalid_argument(fmt::format("engine_generate_batch: request {} appears twice", requests[i].request));
      }
    }
  }
  try {
    for (std::size_t i = 0; i < n; ++i) {
      const EngineGenerateRequest& q = requests[i];
      if (q.options.prefill) q.options.prefill->check_prompt(q.request, q.prompt);
      reason[i] = stop_reason(i);
      if (reason[i] && !keeps_rows(i)) continue;
      std::vector<float>* all_logits = q.options.keep_logits ? &out[i].logits : nullptr;
      started[i] = true;
      last[i] = q.options.prefill ? engine.runner->prefill_from_capture(q.request, q.prompt, *q.options.prefill, all_logits)
                                  : engine.runner->prefill(q.request, q.prompt, all_logits);
      if (q.options.keep_step_logits && !q.options.keep_logits) {
        out[i].logits.assign(last[i].begin(), last[i].begin() + static_cast<std::ptrdiff_t>(V));
      }
    }
    std::vector<std::int64_t> ids;
    std::vector<std::int32_t> tokens, positions;
    std::vector<std::size_t> rows;  // the request of each row of the step
    std::vector<float> logits;
    while (true) {
      ids.clear();
      tokens.clear();
      positions.clear();
      rows.clear();
      for (std::size_t i = 0; i < n; ++i) {
        if (reason[i]) continue;
        const EngineGenerateRequest& q = requests[i];
        EngineGenerateResult& r = out[i];
        const std::int64_t position = static_cast<std::int64_t>(q.prompt.size() + r.generated.size());
        const std::int32_t greedy = greedy_token(q.request, last[i], position - 1);
        const std::size_t step = r.generated.size();
        const std::int32_t next = step < q.options.forced.size() ? q.options.forced[step] : greedy;
        r.greedy.push_back(greedy);
        r.generated.push_back(next);
        reason[i] = stop_reason(i);
        if (reason[i] && !keeps_rows(i)) continue;
        ids.push_back(q.request);
        tokens.push_back(next);
        positions.push_back(static_cast<std::int32_t>(position));
        rows.push_back(i);
      }
      if (ids.empty()) break;
      engine.runner->decode_into(ids, tokens, positions, nullptr, logits);
      for (std::size_t b = 0; b < rows.size(); ++b) {
        const std::size_t i = rows[b];
        const auto row = logits.begin() + static_cast<std::ptrdiff_t>(b * V);
        last[i].assign(row, row + static_cast<std::ptrdiff_t>(V));
        if (keeps_rows(i)) out[i].logits.insert(out[i].logits.end(), row, row + static_cast<std::ptrdiff_t>(V));
      }
    }
    for (std::size_t i = 0; i < n; ++i) out[i].stop_reason = *reason[i];
  } catch (...) {
    for (std::size_t i = 0; i < n; ++i) {
      if (started[i]) engine.cache->release(requests[i].request);
    }
    throw;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (started[i]) engine.cache->release(requests[i].request);
  }
  return out;
}

}  // namespace kvcheck
