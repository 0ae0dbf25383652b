// The evaluation sets, read from JSON Lines files: one JSON object per line, UTF-8. Every line is
// validated when the file is read (whatever --limit later keeps), and every problem is an
// InputError of the form "FILE:LINE: FIELD: what is wrong (schema)".
//
// Held-out text (datasets/eval/heldout.jsonl), one document per line:
//   {"id": string, "text": string}
// Synthetic retrieval tasks (datasets/eval/retrieval.jsonl), one item per line:
//   {"id": string, "task": string, "length_bucket": integer, "prompt": string, "answer": string}
//   task names the task family ("passkey", "kv", "needle", ...); length_bucket is the prompt
//   length the item was built for, in tokens (128, 256, 384, 512, ...); the model is asked to
//   continue `prompt` with exactly `answer`. The answer is tokenized on its own without BOS, so
//   SentencePiece's dummy prefix makes it the tokens of " " + answer: the prompt should end right
//   before the answer's first word, without a trailing space ("... The pass key is").
//   Two optional fields (datasets/eval/long-retrieval.jsonl, for chat models):
//     "depth": integer 0..100, where the asked fact sits in the context, in percent of the
//              context's other tokens before it (0: first, 100: right before the question);
//     "answer_prefix": non-empty string, the start of the assistant's answer: the run renders
//              [user: prompt] with the model's chat template and add_generation_prompt, appends
//              answer_prefix, and the model must generate the tokens of " " + answer next.
//
// Rules for both: strings are non-empty; ids are unique within a file; blank (whitespace-only)
// lines are skipped but still counted for line numbers; other fields are ignored; a file with no
// item is an error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace kvcheck {

// The schemas as written in error messages.
inline constexpr const char* kHeldoutSchema = R"({"id": string, "text": string})";
inline constexpr const char* kRetrievalSchema =
    R"({"id": string, "task": string, "length_bucket": integer, "prompt": string, "answer": string})";
inline constexpr const char* kRetrievalOptionalSchema = R"(optional: "depth": integer 0..100, "answer_prefix": string)";

struct HeldoutDocument {
  std::string id;
  std::string text;
  std::int64_t line = 0;  // 1-based line in the file
};

struct RetrievalItem {
  std::string id;
  std::string task;
  std::int64_t length_bucket = 0;
  std::string prompt;
  std::string answer;
  std::int64_t line = 0;  // 1-based line in the file
  std::int64_t depth = -1;    // percent 0..100; -1 when the item has none
  std::string answer_prefix{};  // empty when the item has none (an initializer: -Wmissing-field-initializers)
};

// Read and validate a whole file. InputError naming the file (missing, unreadable, empty) or
// "FILE:LINE" and the field (not JSON, not an object, missing field, wrong type, empty string,
// duplicate id, length_bucket not positive, depth not an integer in 0..100, answer_prefix not a
// non-empty string).
std::vector<HeldoutDocument> load_heldout(const std::filesystem::path& file);
std::vector<RetrievalItem> load_retrieval(const std::filesystem::path& file);

// At most `limit` items spread over the (task, length_bucket) groups: round-robin over the groups
// in the order they first appear in the file, each group's items in file order, so the first
// `limit` items of a file sorted by task and bucket still cover every group. The result keeps
// file order. All items when limit >= items.size(); none when limit <= 0.
std::vector<RetrievalItem> retrieval_subset(const std::vector<RetrievalItem>& items, std::int64_t limit);

}  // namespace kvcheck
