// The evaluation files that eval, verify, verify --sweep and report read: --heldout FILE and
// --retrieval FILE, or by default <datasets>/eval/heldout.jsonl and retrieval.jsonl
// (oracles/eval_data.h has their format), and how a result file records the ones it used.
#pragma once

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace kvcheck::cli {

// `flag_value` (the --heldout / --retrieval argument) when given, else the default file.
std::filesystem::path heldout_path(const std::string& flag_value);
std::filesystem::path retrieval_path(const std::string& flag_value);

// Reads and validates the files a user named (empty: not named, nothing read), so that a
// malformed line is an InputError naming FILE:LINE before any model work.
void check_eval_files(const std::string& heldout, const std::string& retrieval);

// {"heldout": path, "heldout_hash": ..., "retrieval": path, "retrieval_hash": ...}, each pair
// only for a file that was used (a non-empty path); hashes as cli/report_reference_cache.h's
// file_hash.
nlohmann::json datasets_json(const std::filesystem::path& heldout, const std::filesystem::path& retrieval);

}  // namespace kvcheck::cli
