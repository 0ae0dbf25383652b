#include "cli/items_file.h"

#include <fstream>
#include <set>

#include <fmt/format.h>

#include "cli/jsonl_fields.h"
#include "cli/output_file.h"
#include "cli/report_reference_cache.h"
#include "reference/errors.h"

namespace kvcheck::cli {
namespace {

constexpr const char* kFormat = "kvcheck-items";
constexpr std::int64_t kVersion = 1;

}  // namespace

std::string text_item_id(std::size_t index) { return fmt::format("text-{}", index); }
std::string retrieval_item_id(const RetrievalItem& item) { return "retrieval-" + item.id; }

void write_items_file(const std::filesystem::path& file, nlohmann::json header, const AccuracyInputs& inputs) {
  std::string items;
  const auto P = static_cast<std::ptrdiff_t>(inputs.prompt_tokens);
  for (std::size_t i = 0; i < inputs.prompts.size(); ++i) {
    const std::vector<std::int32_t>& t = inputs.prompts[i].tokens;
    const nlohmann::json j = {{"id", text_item_id(i)},
                              {"kind", "text"},
                              {"source", inputs.prompts[i].source},
                              {"prompt_ids", std::vector<std::int32_t>(t.begin(), t.begin() + P)},
                              {"continuation_ids", std::vector<std::int32_t>(t.begin() + P, t.end())}};
    items += j.dump() + "\n";
  }
  for (const RetrievalCase& rc : inputs.retrieval) {
    const nlohmann::json j = {{"id", retrieval_item_id(rc.item)},
                              {"kind", "retrieval"},
                              {"task", rc.item.task},
                              {"length", rc.item.length_bucket},
                              {"prompt_ids", rc.prompt},
                              {"answer_ids", rc.answer},
                              {"max_new_tokens", rc.answer.size()}};
    items += j.dump() + "\n";
  }
  header["format"] = kFormat;
  header["version"] = kVersion;
  header["items_hash"] = file_hash_of_string(items);
  write_file_atomically(file, "--out", [&](const std::filesystem::path& tmp) {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << header.dump() << "\n" << items;
    if (!out) throw std::runtime_error("write failed");
  });
}

ItemsFile read_items_file(const std::filesystem::path& file, const ModelConfig& config, const std::string& model_hash) {
  ItemsFile f;
  std::string items;  // the item lines as read, for items_hash
  std::set<std::string> ids;
  std::int64_t prompt_tokens = 0, continuation = 0;
  const std::int64_t vocab = config.vocab_size, context = config.max_position_embeddings;
  for_each_jsonl_object(file, [&](const nlohmann::json& j, const std::string& where) {
    if (f.header.is_null()) {
      if (!j.contains("format") || j.at("format") != kFormat) {
        throw input_error(where, "format", "not a kvcheck items file (the first line's \"format\" is \"{}\")", kFormat);
      }
      json_int(j, where, "version", kVersion, kVersion);
      if (json_string(j, where, "model_hash") != model_hash) {
        throw input_error(where, "model_hash", "{} is not the model's ({}): export the items from this model",
                          j.at("model_hash").get<std::string>(), model_hash);
      }
      json_int(j, where, "vocab_size", vocab, vocab);
      json_string(j, where, "heldout_hash");
      json_string(j, where, "retrieval_hash");
      json_string(j, where, "items_hash");
      const nlohmann::json& s = json_field(j, where, "settings");
      if (!s.is_object()) throw input_error(where, "settings", "expected an object");
      const std::string in_settings = where + ": settings";
      json_int(s, in_settings, "prompts", 0, 1 << 20);
      prompt_tokens = json_int(s, in_settings, "prompt_tokens", 1, context);
      continuation = json_int(s, in_settings, "continuation_tokens", 1, context);
      json_int(s, in_settings, "retrieval_items", 0, 1 << 20);
      f.header = j;
      f.inputs.prompt_tokens = prompt_tokens;
      f.inputs.origin = j.contains("prompt_source") && j.at("prompt_source").is_string() ? j.at("prompt_source").get<std::string>()
                                                                                         : "items file";
      return;
    }
    items += j.dump() + "\n";
    const std::string id = json_string(j, where, "id");
    if (!ids.insert(id).second) throw input_error(where, "id", "duplicate item id {}", id);
    const std::string item = where + ": item " + id;
    const std::string kind = json_string(j, where, "kind");
    std::vector<std::int32_t> prompt = json_ids(j, item, "prompt_ids", vocab);
    if (kind == "text") {
      const std::vector<std::int32_t> cont = json_ids(j, item, "continuation_ids", vocab);
      if (static_cast<std::int64_t>(prompt.size()) != prompt_tokens || static_cast<std::int64_t>(cont.size()) != continuation) {
        throw input_error(item, "prompt_ids", "{} + {} tokens; the settings say {} + {}", prompt.size(), cont.size(),
                          prompt_tokens, continuation);
      }
      if (prompt_tokens + continuation > context) {
        throw input_error(item, "continuation_ids", "{} tokens do not fit max_position_embeddings {}", prompt_tokens + continuation,
                          context);
      }
      prompt.insert(prompt.end(), cont.begin(), cont.end());
      f.inputs.prompts.push_back({json_string(j, item, "source"), std::move(prompt)});
      f.text_ids.push_back(id);
    } else if (kind == "retrieval") {
      RetrievalCase rc;
      rc.item.id = id;
      rc.item.task = json_string(j, item, "task");
      rc.item.length_bucket = json_int(j, item, "length", 1, INT64_MAX);
      rc.prompt = std::move(prompt);
      rc.answer = json_ids(j, item, "answer_ids", vocab);
      json_int(j, item, "max_new_tokens", static_cast<std::int64_t>(rc.answer.size()), static_cast<std::int64_t>(rc.answer.size()));
      if (static_cast<std::int64_t>(rc.prompt.size() + rc.answer.size()) > context) {
        throw input_error(item, "prompt_ids", "{} prompt and answer tokens do not fit max_position_embeddings {}",
                          rc.prompt.size() + rc.answer.size(), context);
      }
      f.inputs.retrieval.push_back(std::move(rc));
      f.retrieval_ids.push_back(id);
    } else {
      throw input_error(item, "kind", "\"{}\" is neither \"text\" nor \"retrieval\"", kind);
    }
  });
  if (f.header.is_null()) throw input_error(file.string(), "header", "empty file: no kvcheck-items header line");
  if (file_hash_of_string(items) != f.header.at("items_hash").get<std::string>()) {
    throw input_error(file.string(), "items_hash", "the items do not match the header's hash: the file was edited after export");
  }
  const nlohmann::json& s = f.header.at("settings");
  if (s.at("prompts").get<std::size_t>() != f.text_ids.size() || s.at("retrieval_items").get<std::size_t>() != f.retrieval_ids.size()) {
    throw input_error(file.string(), "settings", "{} text and {} retrieval items; the header says {} and {}", f.text_ids.size(),
                      f.retrieval_ids.size(), s.at("prompts").dump(), s.at("retrieval_items").dump());
  }
  return f;
}

}  // namespace kvcheck::cli
