// Writing engine outputs (cli/engine_output.h) from kvcheck's own engine (kvcheck compare
// --write-engine-output): the consistency check of compare against report, the planted-fault
// tests, and a worked example of the format.
#pragma once

#include <cstdint>
#include <filesystem>

#include "cli/accuracy_run.h"
#include "cli/items_file.h"

namespace kvcheck::cli {

// Per PATH: *.safetensors one file (F32 logits, I64 generated ids); *.jsonl top-k rows of the
// `top_k` largest log-probabilities per position plus the continuation token's (as vLLM's
// prompt_logprobs), and the generated ids; otherwise a directory of ITEM_ID.npy (float32) and
// generated.jsonl. `captured` holds what measure_accuracy's run produced on `items`.
// InputError: top_k with a format other than .jsonl, or a .jsonl without top_k.
void write_engine_output(const std::filesystem::path& path, const ItemsFile& items, const EngineCapture& captured,
                         std::int64_t top_k);

}  // namespace kvcheck::cli
