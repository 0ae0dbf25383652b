#include "cli/jsonl_fields.h"

#include <fstream>

#include "reference/errors.h"

namespace kvcheck::cli {

void for_each_jsonl_object(const std::filesystem::path& file,
                           const std::function<void(const nlohmann::json&, const std::string&)>& on_line) {
  std::ifstream in(file, std::ios::binary);
  if (!in) throw input_error(file.string(), "file", "cannot be opened");
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = file.string() + ":" + std::to_string(n);
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw input_error(where, "line", "not a JSON object");
    on_line(j, where);
  }
}

const nlohmann::json& json_field(const nlohmann::json& j, const std::string& where, const char* key) {
  if (!j.contains(key)) throw input_error(where, key, "missing");
  return j.at(key);
}

std::string json_string(const nlohmann::json& j, const std::string& where, const char* key) {
  const nlohmann::json& v = json_field(j, where, key);
  if (!v.is_string()) throw input_error(where, key, "expected a string, got {}", v.dump());
  return v.get<std::string>();
}

std::int64_t json_int(const nlohmann::json& j, const std::string& where, const char* key, std::int64_t lo, std::int64_t hi) {
  const nlohmann::json& v = json_field(j, where, key);
  if (!v.is_number_integer()) throw input_error(where, key, "expected an integer, got {}", v.dump());
  const std::int64_t x = v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX)
                             ? INT64_MAX
                             : v.get<std::int64_t>();
  if (x < lo || x > hi) throw input_error(where, key, "{} is outside [{}, {}]", v.dump(), lo, hi);
  return x;
}

std::vector<std::int32_t> json_ids(const nlohmann::json& j, const std::string& where, const char* key, std::int64_t vocab,
                                   bool allow_empty) {
  const nlohmann::json& v = json_field(j, where, key);
  if (!v.is_array()) throw input_error(where, key, "expected an array of token ids");
  if (v.empty() && !allow_empty) throw input_error(where, key, "empty");
  std::vector<std::int32_t> ids;
  ids.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const nlohmann::json& t = v[i];
    const bool ok = t.is_number_integer() && (t.is_number_unsigned() ? t.get<std::uint64_t>() < static_cast<std::uint64_t>(vocab)
                                                                      : t.get<std::int64_t>() >= 0 && t.get<std::int64_t>() < vocab);
    if (!ok) throw input_error(where, fmt::format("{}[{}]", key, i), "{} is not a token id in [0, {})", t.dump(), vocab);
    ids.push_back(static_cast<std::int32_t>(t.get<std::int64_t>()));
  }
  return ids;
}

}  // namespace kvcheck::cli
