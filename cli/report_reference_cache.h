// The reference side of kvcheck report, cached on disk: the reference transformer's logits at
// every decode position of the report's prompts, keyed by a hash of the model (config.json, the
// size and first MiB of every weight file), of the held-out and retrieval sets, and of the prompt
// settings. A rerun with the same key reads them back instead of running the reference.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "cli/accuracy_run.h"

namespace kvcheck::cli {

// Hex digest of the model directory's files as above.
std::string model_hash(const std::filesystem::path& dir);
// Hex digest of a file's bytes (FNV-1a 64).
std::string file_hash(const std::filesystem::path& file);
// Hex digest of a string (FNV-1a 64).
std::string file_hash_of_string(const std::string& text);

// The cached reference under `cache_dir` for `key`, if present and well-formed for `inputs`
// (same prompt count and rows); a damaged file is ignored (and overwritten by store).
std::optional<TextReference> load_cached_reference(const std::filesystem::path& cache_dir, const std::string& key,
                                                   const AccuracyInputs& inputs, std::int64_t vocab);
void store_cached_reference(const std::filesystem::path& cache_dir, const std::string& key, const TextReference& ref);

}  // namespace kvcheck::cli
