// The reference side of kvcheck report, cached on disk: the reference transformer's logits at
// every decode position of the report's prompts and its attention structure over them, keyed by a hash of the model (config.json, the
// size and first MiB of every weight file), of the held-out and retrieval sets, and of the prompt
// settings. A rerun with the same key reads them back instead of running the reference.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "cli/accuracy_run.h"
#include "reference/config.h"

namespace kvcheck::cli {

// Bumped whenever the reference's arithmetic changes its bits; names every cache file.
// 2 (2026-11-28): every product through reference/dot_rows.h instead of Eigen's GEMMs.
inline constexpr const char* kReferenceCodeVersion = "reference-2";

// Hex digest of the model directory's files as above.
std::string model_hash(const std::filesystem::path& dir);
// Hex digest of a file's bytes (FNV-1a 64).
std::string file_hash(const std::filesystem::path& file);
// Hex digest of a string (FNV-1a 64).
std::string file_hash_of_string(const std::string& text);

// The cached reference under `cache_dir` for `key`, if present and well-formed for `inputs` and
// the model (same prompt count and rows, one attention entry per layer and kv head, in order, or
// none when `attention` is false); a damaged file or one of an older format is ignored (and
// overwritten by store).
std::optional<TextReference> load_cached_reference(const std::filesystem::path& cache_dir, const std::string& key,
                                                   const AccuracyInputs& inputs, const ModelConfig& config,
                                                   bool attention = true);
// Written to a temporary file and renamed into place; false (nothing left behind) when the cache
// cannot be written: the cache only saves time, so the caller warns and goes on.
bool store_cached_reference(const std::filesystem::path& cache_dir, const std::string& key, const TextReference& ref);

}  // namespace kvcheck::cli
