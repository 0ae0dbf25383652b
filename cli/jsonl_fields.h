// Typed fields of a JSONL line for the items file and the top-k engine output: each getter throws
// an InputError naming WHERE ("FILE:LINE", or "FILE:LINE: item ID") and the field.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvcheck::cli {

// Calls `on_line(json, "FILE:LINE")` for every non-blank line of the file, each parsed as a JSON
// object. InputError naming the file when it cannot be opened, or FILE:LINE for a line that is
// not a JSON object.
void for_each_jsonl_object(const std::filesystem::path& file,
                           const std::function<void(const nlohmann::json&, const std::string&)>& on_line);

const nlohmann::json& json_field(const nlohmann::json& j, const std::string& where, const char* key);
std::string json_string(const nlohmann::json& j, const std::string& where, const char* key);
// An integer field within [lo, hi].
std::int64_t json_int(const nlohmann::json& j, const std::string& where, const char* key, std::int64_t lo, std::int64_t hi);
// An array of token ids, each in [0, vocab); non-empty unless allow_empty.
std::vector<std::int32_t> json_ids(const nlohmann::json& j, const std::string& where, const char* key, std::int64_t vocab,
                                   bool allow_empty = false);

}  // namespace kvcheck::cli
