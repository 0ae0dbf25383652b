#include "oracles/eval_data.h"

#include <algorithm>
#include <fstream>
#include <map>
#include <functional>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "reference/errors.h"

namespace kvcheck {

namespace {

using nlohmann::json;

// "an integer", "a string", ... for messages.
std::string type_name(const json& j) {
  if (j.is_number_integer()) return "an integer";
  if (j.is_number_float()) return "a number (not an integer)";
  if (j.is_array()) return "an array";
  if (j.is_object()) return "an object";
  if (j.is_null()) return "null";
  return std::string("a ") + j.type_name();
}

// Reads `file` line by line; calls `parse(object, where)` on each non-blank line's JSON object,
// where = "FILE:LINE". Returns the number of items.
std::int64_t for_each_object(const std::filesystem::path& file, const char* schema,
                             const std::function<void(const json&, const std::string&, std::int64_t)>& parse) {
  const std::string name = file.string();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) {
    throw input_error(name, "file", "not found (expected JSON Lines, one object per line: {})", schema);
  }
  if (std::filesystem::is_directory(file, ec)) {
    throw input_error(name, "file", "is a directory, not a JSON Lines file");
  }
  std::ifstream in(file, std::ios::binary);
  if (!in) throw input_error(name, "file", "cannot be read");
  std::string text;
  std::int64_t line_no = 0;
  std::int64_t items = 0;
  while (std::getline(in, text)) {
    ++line_no;
    if (!text.empty() && text.back() == '\r') text.pop_back();
    if (text.find_first_not_of(" \t") == std::string::npos) continue;
    const std::string where = fmt::format("{}:{}", name, line_no);
    json j;
    try {
      j = json::parse(text);
    } catch (const json::parse_error& e) {
      throw input_error(where, "line", "not valid JSON ({}); expected one object per line: {}", e.what(), schema);
    }
    if (!j.is_object()) {
      throw input_error(where, "line", "is {}, expected a JSON object: {}", type_name(j), schema);
    }
    parse(j, where, line_no);
    ++items;
  }
  if (items == 0) throw input_error(name, "file", "holds no items (expected one object per line: {})", schema);
  return items;
}

std::string get_string(const json& j, const std::string& where, const char* field, const char* schema) {
  const auto it = j.find(field);
  if (it == j.end()) throw input_error(where, field, "missing field (schema: {})", schema);
  if (!it->is_string()) throw input_error(where, field, "is {}, expected a string (schema: {})", type_name(*it), schema);
  std::string s = it->get<std::string>();
  if (s.empty()) throw input_error(where, field, "empty string");
  return s;
}

std::int64_t get_integer(const json& j, const std::string& where, const char* field, const char* schema) {
  const auto it = j.find(field);
  if (it == j.end()) throw input_error(where, field, "missing field (schema: {})", schema);
  if (!it->is_number_integer()) {
    throw input_error(where, field, "is {}, expected an integer (schema: {})", type_name(*it), schema);
  }
  if (it->is_number_unsigned() && it->get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
    throw input_error(where, field, "{} is too large", it->get<std::uint64_t>());
  }
  return it->get<std::int64_t>();
}

// Duplicate ids: InputError naming both lines.
class IdSet {
 public:
  void add(const std::string& id, const std::string& where, std::int64_t line) {
    const auto [it, inserted] = lines_.emplace(id, line);
    if (!inserted) throw input_error(where, "id", "'{}' repeats the id of line {}", id, it->second);
  }

 private:
  std::unordered_map<std::string, std::int64_t> lines_;
};

}  // namespace

std::vector<HeldoutDocument> load_heldout(const std::filesystem::path& file) {
  std::vector<HeldoutDocument> docs;
  IdSet ids;
  for_each_object(file, kHeldoutSchema, [&](const json& j, const std::string& where, std::int64_t line) {
    HeldoutDocument d;
    d.id = get_string(j, where, "id", kHeldoutSchema);
    d.text = get_string(j, where, "text", kHeldoutSchema);
    d.line = line;
    ids.add(d.id, where, line);
    docs.push_back(std::move(d));
  });
  return docs;
}

std::vector<RetrievalItem> load_retrieval(const std::filesystem::path& file) {
  std::vector<RetrievalItem> items;
  IdSet ids;
  for_each_object(file, kRetrievalSchema, [&](const json& j, const std::string& where, std::int64_t line) {
    RetrievalItem r;
    r.id = get_string(j, where, "id", kRetrievalSchema);
    r.task = get_string(j, where, "task", kRetrievalSchema);
    r.length_bucket = get_integer(j, where, "length_bucket", kRetrievalSchema);
    if (r.length_bucket <= 0) throw input_error(where, "length_bucket", "must be positive, got {}", r.length_bucket);
    r.prompt = get_string(j, where, "prompt", kRetrievalSchema);
    r.answer = get_string(j, where, "answer", kRetrievalSchema);
    if (j.contains("depth")) {
      r.depth = get_integer(j, where, "depth", kRetrievalOptionalSchema);
      if (r.depth < 0 || r.depth > 100) throw input_error(where, "depth", "must be a percent in 0..100, got {}", r.depth);
    }
    if (j.contains("answer_prefix")) r.answer_prefix = get_string(j, where, "answer_prefix", kRetrievalOptionalSchema);
    r.line = line;
    ids.add(r.id, where, line);
    items.push_back(std::move(r));
  });
  return items;
}

std::vector<RetrievalItem> retrieval_subset(const std::vector<RetrievalItem>& items, std::int64_t limit) {
  if (limit >= static_cast<std::int64_t>(items.size())) return items;
  // Groups in order of first appearance; each a list of item indices in file order.
  std::map<std::pair<std::string, std::int64_t>, std::size_t> group_of;
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto [it, inserted] = group_of.emplace(std::make_pair(items[i].task, items[i].length_bucket), groups.size());
    if (inserted) groups.emplace_back();
    groups[it->second].push_back(i);
  }
  std::vector<std::size_t> chosen;
  for (std::size_t round = 0; static_cast<std::int64_t>(chosen.size()) < limit; ++round) {
    for (const std::vector<std::size_t>& g : groups) {
      if (round < g.size() && static_cast<std::int64_t>(chosen.size()) < limit) chosen.push_back(g[round]);
    }
  }
  std::sort(chosen.begin(), chosen.end());
  std::vector<RetrievalItem> out;
  for (const std::size_t i : chosen) out.push_back(items[i]);
  return out;
}

}  // namespace kvcheck
