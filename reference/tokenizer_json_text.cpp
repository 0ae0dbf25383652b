#include "reference/tokenizer_json_text.h"

#include <cstdlib>
#include <memory>
#include <unordered_map>

#include <utf8proc.h>

namespace kvcheck::tokjson {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD

bool in(unsigned char b, unsigned lo, unsigned hi) { return b >= lo && b <= hi; }

// Length of the well-formed sequence at bytes[at], or 0 when ill-formed; `consumed` is then the
// length of the maximal subpart (at least 1), which one U+FFFD replaces.
std::size_t well_formed_length(std::string_view bytes, std::size_t at, std::size_t& consumed) {
  const auto b0 = static_cast<unsigned char>(bytes[at]);
  consumed = 1;
  if (b0 < 0x80) return 1;
  std::size_t need = 0;
  unsigned lo = 0x80, hi = 0xBF;  // range of the second byte
  if (in(b0, 0xC2, 0xDF)) {
    need = 1;
  } else if (b0 == 0xE0) {
    need = 2, lo = 0xA0;
  } else if (in(b0, 0xE1, 0xEC) || in(b0, 0xEE, 0xEF)) {
    need = 2;
  } else if (b0 == 0xED) {
    need = 2, hi = 0x9F;
  } else if (b0 == 0xF0) {
    need = 3, lo = 0x90;
  } else if (in(b0, 0xF1, 0xF3)) {
    need = 3;
  } else if (b0 == 0xF4) {
    need = 3, hi = 0x8F;
  } else {
    return 0;
  }
  for (std::size_t k = 1; k <= need; ++k) {
    if (at + k >= bytes.size()) return 0;
    const auto b = static_cast<unsigned char>(bytes[at + k]);
    const bool ok = k == 1 ? in(b, lo, hi) : in(b, 0x80, 0xBF);
    if (!ok) return 0;
    consumed = k + 1;
  }
  return need + 1;
}

}  // namespace

std::string utf8_repair(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  std::size_t at = 0;
  while (at < bytes.size()) {
    std::size_t consumed = 0;
    const std::size_t len = well_formed_length(bytes, at, consumed);
    if (len > 0) {
      out.append(bytes.substr(at, len));
      at += len;
    } else {
      out.append(kReplacement);
      at += consumed;
    }
  }
  return out;
}

std::size_t utf8_char_len(std::string_view text, std::size_t at) {
  const auto b = static_cast<unsigned char>(text[at]);
  if (b < 0x80) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

char32_t utf8_decode_at(std::string_view text, std::size_t at) {
  const std::size_t len = utf8_char_len(text, at);
  const auto b0 = static_cast<unsigned char>(text[at]);
  if (len == 1) return b0;
  char32_t cp = b0 & (len == 2 ? 0x1Fu : len == 3 ? 0x0Fu : 0x07u);
  for (std::size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[at + k]) & 0x3Fu);
  return cp;
}

std::string utf8_encode(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

bool is_unicode_whitespace(char32_t cp) {
  if ((cp >= 0x09 && cp <= 0x0D) || cp == 0x85) return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return cat == UTF8PROC_CATEGORY_ZS || cat == UTF8PROC_CATEGORY_ZL || cat == UTF8PROC_CATEGORY_ZP;
}

bool is_unicode_alphanumeric(char32_t cp) {
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

std::string normalize_unicode(std::string_view text, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc: options |= UTF8PROC_COMPOSE; break;
    case NormalForm::kNfd: options |= UTF8PROC_DECOMPOSE; break;
    case NormalForm::kNfkc: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case NormalForm::kNfkd: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                   static_cast<utf8proc_ssize_t>(text.size()), &out, static_cast<utf8proc_option_t>(options));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> owned(out, &std::free);
  // Only fails on invalid UTF-8 or out of memory; our text is repaired UTF-8, so keep it as is.
  if (n < 0) return std::string(text);
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

namespace {

struct ByteLevelTables {
  std::array<std::string, 256> alphabet;
  std::unordered_map<char32_t, std::uint8_t> bytes;
  ByteLevelTables() {
    char32_t next = 256;
    for (unsigned b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      const char32_t cp = printable ? static_cast<char32_t>(b) : next++;
      alphabet[b] = utf8_encode(cp);
      bytes.emplace(cp, static_cast<std::uint8_t>(b));
    }
  }
};

const ByteLevelTables& byte_level_tables() {
  static const ByteLevelTables tables;
  return tables;
}

}  // namespace

const std::array<std::string, 256>& byte_level_alphabet() { return byte_level_tables().alphabet; }

std::optional<std::uint8_t> byte_level_byte(char32_t cp) {
  const auto& bytes = byte_level_tables().bytes;
  const auto it = bytes.find(cp);
  if (it == bytes.end()) return std::nullopt;
  return it->second;
}

}  // namespace kvcheck::tokjson
