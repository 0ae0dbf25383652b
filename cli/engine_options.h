// The optimized engine of `generate` and `verify` (both of its modes): one request at a time,
// configured by the flags they share (--device, --kv-pages, --page-bytes, --threads).
#pragma once

#include <string>

#include "optimized/engine.h"

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

}  // namespace kvcheck::cli
