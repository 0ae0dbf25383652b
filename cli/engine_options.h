// The optimized engine of `generate` and `verify` (both of its modes): one request at a time,
// configured by the flags they share (--device, --kv-pages, --page-bytes, --threads), and the
// page size of a paged baseline.
#pragma once

#include <string>

#include "kernels/cpu/kv_bytes.h"
#include "optimized/engine.h"
#include "optimized/kv_policy.h"
#include "reference/errors.h"

namespace kvcheck::cli {

// Args: GenerateArgs or VerifyArgs.
template <typename Args>
EngineOptions single_request_engine_options(const Args& args, const std::string& policy) {
  EngineOptions eo;
  eo.device = args.device;
  eo.policy = policy;
  eo.pages = args.kv_pages;
  eo.page_bytes = args.page_bytes;
  eo.threads = args.threads;
  eo.batch_hint = 1;
  return eo;
}

// The smallest page (in 256-byte steps) holding 16 tokens of a full-fp16 head: vLLM's block size,
// the page of the serving benchmark and of SpvLLM's strategies in the report.
inline std::int64_t sixteen_token_page_bytes(const ModelConfig& c) {
  const KvTier tier = make_policy("full-fp16")->tiers().front();
  for (std::int64_t bytes = 256;; bytes += 256) {
    try {
      if (tokens_per_page(tier, c.head_dim, bytes) >= 16) return bytes;
    } catch (const InputError&) {
      // not even one token fits yet
    }
  }
}

}  // namespace kvcheck::cli
