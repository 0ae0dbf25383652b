#include "reference/tokenizer_json_regex.h"

#include <memory>
#include <mutex>

#include <oniguruma.h>

#include "reference/errors.h"
#include "reference/tokenizer_json_text.h"

namespace kvcheck::tokjson {
namespace {

void initialize_oniguruma() {
  static std::once_flag once;
  std::call_once(once, [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    onig_initialize(encodings, 1);
  });
}

const auto* bytes_of(std::string_view s) { return reinterpret_cast<const OnigUChar*>(s.data()); }

}  // namespace

Regex::Regex(std::string_view pattern, const std::string& file, const std::string& field) {
  initialize_oniguruma();
  OnigRegex regex = nullptr;
  OnigErrorInfo info{};
  const int rc = onig_new(&regex, bytes_of(pattern), bytes_of(pattern) + pattern.size(), ONIG_OPTION_NONE,
                          ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (rc != ONIG_NORMAL) {
    OnigUChar message[ONIG_MAX_ERROR_MESSAGE_LEN];
    onig_error_code_to_str(message, rc, &info);
    throw input_error(file, field, "the regex does not compile (Oniguruma: {})", reinterpret_cast<const char*>(message));
  }
  regex_ = regex;
}

Regex::~Regex() { onig_free(static_cast<OnigRegex>(regex_)); }

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  std::unique_ptr<OnigRegion, void (*)(OnigRegion*)> region(onig_region_new(),
                                                            [](OnigRegion* r) { onig_region_free(r, 1); });
  const OnigUChar* begin = bytes_of(text);
  const OnigUChar* end = begin + text.size();
  std::size_t from = 0;
  bool have_last = false;
  std::size_t last_end = 0;
  while (from <= text.size()) {
    onig_region_clear(region.get());
    const int at = onig_search(static_cast<OnigRegex>(regex_), begin, end, begin + from, end, region.get(),
                               ONIG_OPTION_NONE);
    if (at < 0) break;  // ONIG_MISMATCH, or a limit reached: no further matches
    const auto s = static_cast<std::size_t>(region->beg[0]);
    const auto e = static_cast<std::size_t>(region->end[0]);
    if (s == e && have_last && last_end == e) {
      if (from >= text.size()) break;
      from += utf8_char_len(text, from);
      continue;
    }
    matches.emplace_back(s, e);
    have_last = true;
    last_end = e;
    from = e;
  }
  return matches;
}

}  // namespace kvcheck::tokjson
