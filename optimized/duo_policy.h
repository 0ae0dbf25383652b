// DuoAttention: retrieval heads with a full cache, streaming heads with sinks and a window.
//
// Each kv head of the model is one of two kinds:
//   retrieval  keeps every token, prompt and generated;
//   streaming  keeps exactly StreamingLLM's set: the first `sinks` positions and the `recent` most
//              recent ones (the prompt is cut to those at prefill; each decode step past
//              sinks + recent drops the oldest token that is not a sink).
//
// Which heads retrieve is a property of the model, not of the request, so it is fixed before any
// request:
//   heads=i/j/...  the calibrated choice (`kvcheck verify --duo-calibrate N` writes it): the kv
//                  heads, numbered layer * kv_heads + head, that keep everything;
//   retrieval=R    without `heads`: the first ceil(R * layers * kv_heads) kv heads in that
//                  numbering retrieve (layer 0's first). This default knows nothing of the model:
//                  it only fixes how many heads keep everything, deterministically, so that an
//                  uncalibrated row measures the cost of that many full heads. Choosing the heads
//                  from the request being served would need its attention before it is computed.
// A `heads` entry outside the model is an InputError when the engine is built. Stored in fp16.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "optimized/kv_policy.h"

namespace kvcheck {

struct DuoParams {
  double retrieval = 0.25;          // share of the kv heads that retrieve (unused when heads is set)
  std::int64_t sinks = 4;           // streaming heads: first positions kept
  std::int64_t recent = 60;         // streaming heads: most recent positions kept
  std::vector<std::int64_t> heads;  // the retrieval heads, layer * kv_heads + head (empty: the default)
};

// Whether kv head `head` of `layer` retrieves, in a model of `layers` x `kv_heads` kv heads.
bool duo_is_retrieval(const DuoParams& params, std::int64_t layer, std::int64_t head, std::int64_t layers,
                      std::int64_t kv_heads);
// The default's count of retrieval heads: ceil(retrieval * heads) (within 1e-9 of an integer: it).
std::int64_t duo_default_retrieval_heads(double retrieval, std::int64_t heads);

std::unique_ptr<KvPolicy> make_duo_policy(const DuoParams& params);
// The parameters of a duo policy, or nullopt for any other policy.
std::optional<DuoParams> duo_params_of(const KvPolicy& policy);

// Registry entry (optimized/policy_registry.h).
PolicyEntry duo_policy_entry();

}  // namespace kvcheck
