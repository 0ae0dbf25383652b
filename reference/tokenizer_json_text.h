// Text helpers of the tokenizer.json reader (reference/tokenizer_json.cpp): UTF-8 repair and
// iteration, the character classes tokenizers' added-token matching uses, Unicode normalization
// through utf8proc, and GPT-2's byte-level alphabet. No Unicode tables of our own.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace kvcheck::tokjson {

// `bytes` with every invalid UTF-8 sequence replaced by U+FFFD, one per maximal subpart of an
// ill-formed sequence (Unicode's "best practice", what Python's bytes.decode(errors="replace")
// and Rust's String::from_utf8_lossy do). Valid UTF-8 comes back unchanged.
std::string utf8_repair(std::string_view bytes);

// Byte length of the UTF-8 character starting at text[at] (text is valid UTF-8).
std::size_t utf8_char_len(std::string_view text, std::size_t at);
// The code point starting at text[at] (text is valid UTF-8).
char32_t utf8_decode_at(std::string_view text, std::size_t at);
std::string utf8_encode(char32_t cp);

// Rust's char::is_whitespace (Unicode White_Space), used by lstrip / rstrip.
bool is_unicode_whitespace(char32_t cp);
// Rust's char::is_alphanumeric (letters and numbers), used by single_word.
bool is_unicode_alphanumeric(char32_t cp);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// `text` (valid UTF-8) in the given normal form (utf8proc).
std::string normalize_unicode(std::string_view text, NormalForm form);

// GPT-2's bytes_to_unicode: every byte as a printable character (UTF-8 encoded).
const std::array<std::string, 256>& byte_level_alphabet();
// The byte a byte-level character stands for, or nullopt when `cp` is not one of them.
std::optional<std::uint8_t> byte_level_byte(char32_t cp);

}  // namespace kvcheck::tokjson
