// generate --chat's template rendering, held to jinja2 running SmolLM2's own template
// (datasets/chat/make_chat_expected.py: 11 conversations, their text and llama.cpp's ids).
#include "reference/chat_template.h"

#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "properties/support/model_fixtures.h"
#include "properties/support/test_support.h"
#include "reference/tokenizer.h"

namespace kvcheck {
namespace {

using testing::expect_input_error;
using testing::read_file;
using testing::source_path;

TEST(ChatTemplate, SmolLm2ConversationsRenderAsJinja2AndTokenizeAsLlamaCpp) {
  const std::string tmpl = read_file(source_path("datasets/chat/smollm2-chat-template.jinja"));
  const std::filesystem::path model = testing::smollm2_gguf();
  std::optional<Tokenizer> tok;
  if (!model.empty()) {
    EXPECT_EQ(find_chat_template(model), tmpl);
    tok = Tokenizer::load(model);
  }
  std::ifstream in(source_path("datasets/chat/smollm2-chat.jsonl"));
  int n = 0;
  for (std::string line; std::getline(in, line); ++n) {
    const nlohmann::json j = nlohmann::json::parse(line);
    std::vector<ChatMessage> messages;
    for (const auto& m : j["messages"]) messages.push_back({m["role"], m["content"]});
    const std::string text = render_chat(tmpl, messages, j["add_generation_prompt"], "smollm2");
    EXPECT_EQ(text, j["text"].get<std::string>()) << "conversation " << n;
    if (tok) {
      EXPECT_EQ(tok->encode(text, false), j["ids"].get<std::vector<std::int32_t>>()) << "conversation " << n;
    }
  }
  EXPECT_GE(n, 10);
  if (model.empty()) GTEST_SKIP() << "rendering checked; ids not: " << testing::kSmolLm2Missing;
}

TEST(ChatTemplate, QwenStyleDefaultSystemAndRefusals) {
  // Qwen2.5 writes its default system message with an escaped newline inside the literal.
  const std::string qwen =
      "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
      "{%- else %}{{- '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}{%- endif %}"
      "{%- for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
      "{%- endfor %}";
  EXPECT_EQ(render_chat(qwen, {{"user", "hi"}}, true, "q"),
            "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(qwen, {{"system", "S"}, {"user", "hi"}}, false, "q"),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
  expect_input_error([] { (void)render_chat("{{ bos_token }}[INST] {{ m }} [/INST]", {{"user", "x"}}, true, "m.gguf"); },
                     {"m.gguf", "chat template", "ChatML"});
  expect_input_error([&] { (void)render_chat(qwen, {{"", "x"}}, true, "m.gguf"); }, {"m.gguf", "chat message 0", "role"});
}

}  // namespace
}  // namespace kvcheck
