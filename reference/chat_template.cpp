#include "reference/chat_template.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "reference/errors.h"
#include "reference/gguf.h"

namespace kvcheck {

namespace {

constexpr std::string_view kStart = "<|im_start|>";
constexpr std::string_view kEnd = "<|im_end|>";

// A Jinja string literal's escapes (\n, \', \\) as the text they stand for.
std::string unescape(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char c = s[++i];
      out += c == 'n' ? '\n' : c == 't' ? '\t' : c;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The system message a ChatML template writes when the conversation starts without one: the
// literal "<|im_start|>system\n...<|im_end|>" inside the template, if any.
std::optional<std::string> default_system(const std::string& t) {
  for (const std::string_view open : {"<|im_start|>system\n", "<|im_start|>system\\n"}) {
    for (std::size_t at = t.find(open); at != std::string::npos; at = t.find(open, at + 1)) {
      const std::size_t begin = at + open.size();
      const std::size_t end = t.find(kEnd, begin);
      if (end == std::string::npos) break;
      const std::string_view body = std::string_view(t).substr(begin, end - begin);
      // A literal, not the template's own "messages[0]['content']" expression.
      if (body.find('{') == std::string_view::npos && body.find('\'') == std::string_view::npos) return unescape(body);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> find_chat_template(const std::filesystem::path& model) {
  if (is_gguf_file(model)) return GgufFile::open(model).get_string_opt("tokenizer.chat_template");
  const std::filesystem::path config = model / "tokenizer_config.json";
  std::ifstream in(config, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw input_error(config.string(), "tokenizer_config.json", "invalid JSON: {}", e.what());
  }
  const auto it = j.find("chat_template");
  if (it == j.end() || !it->is_string()) return std::nullopt;
  return it->get<std::string>();
}

std::string render_chat(const std::string& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& origin) {
  if (chat_template.find(kStart) == std::string::npos || chat_template.find(kEnd) == std::string::npos) {
    throw input_error(origin, "chat template",
                      "not a ChatML template (the only family kvcheck renders); give the rendered prompt with --prompt");
  }
  std::string out;
  if (!messages.empty() && messages.front().role != "system") {
    if (const std::optional<std::string> system = default_system(chat_template)) {
      out += std::string(kStart) + "system\n" + *system + std::string(kEnd) + "\n";
    }
  }
  for (std::size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role.empty()) throw input_error(origin, "chat message " + std::to_string(i), "has no role");
    out += std::string(kStart) + messages[i].role + "\n" + messages[i].content + std::string(kEnd) + "\n";
  }
  if (add_generation_prompt) out += std::string(kStart) + "assistant\n";
  return out;
}

}  // namespace kvcheck
