// A compiled Oniguruma regex (the engine Hugging Face tokenizers uses, same syntax) for the
// tokenizer.json reader's Split / Replace patterns.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvcheck::tokjson {

class Regex {
 public:
  // InputError "<file>: <field>: ..." when `pattern` does not compile.
  Regex(std::string_view pattern, const std::string& file, const std::string& field);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Every non-overlapping match [start, end) of `text` (valid UTF-8), left to right, as
  // tokenizers' onig find_iter gives them: an empty match right after the previous match is
  // skipped. A search that hits Oniguruma's backtracking limit ends the list there.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;

 private:
  void* regex_ = nullptr;  // OnigRegex
};

}  // namespace kvcheck::tokjson
