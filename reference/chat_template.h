// Chat prompts: a model's chat template applied to one conversation, for `generate --chat`.
//
// kvcheck does not run Jinja. It recognizes the ChatML family of templates (SmolLM2, Qwen2.5,
// Qwen3: "<|im_start|>ROLE\nCONTENT<|im_end|>\n" per message, then "<|im_start|>assistant\n")
// and renders them as the template does, including the default system message a template adds
// when the conversation has none (read from the template's own text). Any other template is
// refused naming it; give the rendered prompt with --prompt instead. The result is held to
// jinja2's rendering of the real template (datasets/chat/).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace kvcheck {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

// The chat template of a model: a GGUF file's tokenizer.chat_template, or a model directory's
// tokenizer_config.json "chat_template" (a string); nullopt when there is none.
std::optional<std::string> find_chat_template(const std::filesystem::path& model);

// `messages` rendered with `chat_template`. InputError naming `origin` and the template when it
// is not one kvcheck recognizes, or a message's role is empty.
std::string render_chat(const std::string& chat_template, const std::vector<ChatMessage>& messages,
                        bool add_generation_prompt, const std::string& origin);

}  // namespace kvcheck
