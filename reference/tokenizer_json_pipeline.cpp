// The stages of a tokenizer.json pipeline: every normalizer, pre-tokenizer and decoder kvcheck
// reads, each a small class, and the factories that build them from JSON (naming the file and the
// field on anything unsupported). Over 600 lines because it is one table of ~25 small stages that
// share the field readers at the top; splitting it by stage kind would split those readers too.
#include "reference/tokenizer_json_pipeline.h"

#include <optional>

#include <fmt/format.h>

#include "reference/errors.h"
#include "reference/tokenizer_json_regex.h"
#include "reference/tokenizer_json_text.h"

namespace kvcheck::tokjson {
namespace {

using nlohmann::json;

// Field access that names file and field in every error.
struct Fields {
  const json& node;
  const std::string& file;
  const std::string& field;

  std::string at(const std::string& key) const { return fmt::format("{}.{}", field, key); }
  const json& required(const char* key) const {
    const auto it = node.find(key);
    if (it == node.end()) throw input_error(file, at(key), "missing");
    return *it;
  }
  std::string string(const char* key) const {
    const json& v = required(key);
    if (!v.is_string()) throw input_error(file, at(key), "must be a string, got {}", v.dump());
    return v.get<std::string>();
  }
  bool flag(const char* key, bool fallback) const {
    const auto it = node.find(key);
    if (it == node.end() || it->is_null()) return fallback;
    if (!it->is_boolean()) throw input_error(file, at(key), "must be true or false, got {}", it->dump());
    return it->get<bool>();
  }
  std::size_t count(const char* key, std::size_t fallback) const {
    const auto it = node.find(key);
    if (it == node.end() || it->is_null()) return fallback;
    if (!it->is_number_unsigned()) throw input_error(file, at(key), "must be a non-negative integer, got {}", it->dump());
    return it->get<std::size_t>();
  }
  // A one-character string (Metaspace's replacement, Strip's content).
  std::string one_char(const char* key) const {
    std::string s = string(key);
    if (s.empty() || utf8_char_len(s, 0) != s.size()) throw input_error(file, at(key), "must be one character, got {}", json(s).dump());
    return s;
  }
};

std::string type_of(const json& node, const std::string& file, const std::string& field) {
  if (!node.is_object()) throw input_error(file, field, "must be an object or null, got {}", node.dump());
  return Fields{node, file, field}.string("type");
}

const json& array_field(const Fields& f, const char* key) {
  const json& v = f.required(key);
  if (!v.is_array()) throw input_error(f.file, f.at(key), "must be an array");
  return v;
}

// {"String": "..."} or {"Regex": "..."}: a literal or an Oniguruma regex.
class Pattern {
 public:
  Pattern(const json& node, const std::string& file, const std::string& field) {
    if (!node.is_object() || node.size() != 1) throw input_error(file, field, "must be {{\"String\": ...}} or {{\"Regex\": ...}}");
    const std::string kind = node.begin().key();
    const json& value = node.begin().value();
    if (!value.is_string()) throw input_error(file, fmt::format("{}.{}", field, kind), "must be a string");
    if (kind == "String") {
      literal_ = value.get<std::string>();
    } else if (kind == "Regex") {
      regex_ = std::make_unique<Regex>(value.get<std::string>(), file, fmt::format("{}.Regex", field));
    } else {
      throw input_error(file, field, "pattern kind \"{}\" is not String or Regex", kind);
    }
  }
  // Non-overlapping matches, left to right.
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const {
    if (regex_) return regex_->find_all(text);
    std::vector<std::pair<std::size_t, std::size_t>> out;
    if (literal_.empty()) return out;
    for (std::size_t at = text.find(literal_); at != std::string_view::npos; at = text.find(literal_, at + literal_.size())) {
      out.emplace_back(at, at + literal_.size());
    }
    return out;
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

std::string replace_all(const std::string& text, const Pattern& pattern, const std::string& content) {
  std::string out;
  std::size_t prev = 0;
  for (const auto& [s, e] : pattern.find_all(text)) {
    out.append(text, prev, s - prev);
    out += content;
    prev = e;
  }
  out.append(text, prev, std::string::npos);
  return out;
}

// ---- normalizers ---------------------------------------------------------------------------

class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  void normalize(std::string& text) const override { text = normalize_unicode(text, form_); }

 private:
  NormalForm form_;
};

class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prepend) : prepend_(std::move(prepend)) {}
  void normalize(std::string& text) const override {
    if (!text.empty()) text.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(const json& node, const std::string& file, const std::string& field)
      : pattern_(Fields{node, file, field}.required("pattern"), file, field + ".pattern"),
        content_(Fields{node, file, field}.string("content")) {}
  void normalize(std::string& text) const override { text = replace_all(text, pattern_, content_); }

 private:
  Pattern pattern_;
  std::string content_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> stages) : stages_(std::move(stages)) {}
  void normalize(std::string& text) const override {
    for (const auto& stage : stages_) stage->normalize(text);
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> stages_;
};

// ---- pre-tokenizers -------------------------------------------------------------------------

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior parse_behavior(const Fields& f) {
  const std::string b = f.string("behavior");
  if (b == "Removed") return Behavior::kRemoved;
  if (b == "Isolated") return Behavior::kIsolated;
  if (b == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::kMergedWithNext;
  if (b == "Contiguous") return Behavior::kContiguous;
  throw input_error(f.file, f.at("behavior"), "\"{}\" is not Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous", b);
}

struct Span {
  std::size_t start, end;
  bool is_match;
};

// tokenizers' NormalizedString::split: the pieces of `piece` around `matches` per `behavior`.
void split_piece(const Piece& piece, const std::vector<std::pair<std::size_t, std::size_t>>& matches, bool invert,
                 Behavior behavior, std::vector<Piece>& out) {
  const std::string& text = piece.text;
  std::vector<Span> spans;
  std::size_t prev = 0;
  for (const auto& [s, e] : matches) {
    if (prev != s) spans.push_back({prev, s, invert});
    spans.push_back({s, e, !invert});
    prev = e;
  }
  if (prev != text.size()) spans.push_back({prev, text.size(), invert});

  std::vector<std::pair<Span, bool>> kept;  // (span, remove)
  bool previous_match = false;
  switch (behavior) {
    case Behavior::kIsolated:
      for (const Span& s : spans) kept.push_back({s, false});
      break;
    case Behavior::kRemoved:
      for (const Span& s : spans) kept.push_back({s, s.is_match});
      break;
    case Behavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !kept.empty()) {
          kept.back().first.end = s.end;
        } else {
          kept.push_back({s, false});
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !kept.empty()) {
          kept.back().first.end = s.end;
        } else {
          kept.push_back({s, false});
        }
        previous_match = s.is_match;
      }
      break;
    case Behavior::kMergedWithNext:
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().first.start = it->start;
        } else {
          kept.push_back({*it, false});
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const auto& [s, remove] : kept) {
    if (remove || s.end == s.start) continue;
    out.push_back({text.substr(s.start, s.end - s.start), piece.at_origin && s.start == 0});
  }
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(const json& node, const std::string& file, const std::string& field)
      : pattern_(Fields{node, file, field}.required("pattern"), file, field + ".pattern"),
        behavior_(parse_behavior(Fields{node, file, field})),
        invert_(Fields{node, file, field}.flag("invert", false)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : pieces) split_piece(p, pattern_.find_all(p.text), invert_, behavior_, out);
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's pre-tokenization regex, which ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(const json& node, const std::string& file, const std::string& field) {
    const Fields f{node, file, field};
    add_prefix_space_ = f.flag("add_prefix_space", true);
    if (f.flag("use_regex", true)) regex_ = std::make_unique<Regex>(kGpt2Regex, file, field);
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> split;
    for (Piece& p : pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
      if (regex_) {
        split_piece(p, regex_->find_all(p.text), false, Behavior::kIsolated, split);
      } else if (!p.text.empty()) {
        split.push_back(std::move(p));
      }
    }
    const auto& alphabet = byte_level_alphabet();
    for (Piece& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += alphabet[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  bool add_prefix_space_ = true;
  std::unique_ptr<Regex> regex_;
};

enum class PrependScheme { kAlways, kNever, kFirst };

class MetaspacePreTokenizer final : public PreTokenizer {
 public:
  MetaspacePreTokenizer(const json& node, const std::string& file, const std::string& field) {
    const Fields f{node, file, field};
    replacement_ = f.one_char("replacement");
    split_ = f.flag("split", true);
    const auto it = node.find("prepend_scheme");
    if (it != node.end() && !it->is_null()) {
      const std::string s = f.string("prepend_scheme");
      if (s == "always") scheme_ = PrependScheme::kAlways;
      else if (s == "never") scheme_ = PrependScheme::kNever;
      else if (s == "first") scheme_ = PrependScheme::kFirst;
      else throw input_error(file, f.at("prepend_scheme"), "\"{}\" is not always, never or first", s);
    } else {
      // The older format: add_prefix_space true means "always".
      scheme_ = f.flag("add_prefix_space", true) ? PrependScheme::kAlways : PrependScheme::kNever;
    }
  }
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (Piece& p : pieces) {
      std::string text;
      text.reserve(p.text.size() + replacement_.size());
      for (char c : p.text) {
        if (c == ' ') text += replacement_;
        else text += c;
      }
      const bool starts = text.compare(0, replacement_.size(), replacement_) == 0;
      if (!starts && (scheme_ == PrependScheme::kAlways || (scheme_ == PrependScheme::kFirst && p.at_origin))) {
        text.insert(0, replacement_);
      }
      Piece replaced{std::move(text), p.at_origin};
      if (!split_) {
        if (!replaced.text.empty()) out.push_back(std::move(replaced));
        continue;
      }
      std::vector<std::pair<std::size_t, std::size_t>> matches;
      for (std::size_t at = replaced.text.find(replacement_); at != std::string::npos;
           at = replaced.text.find(replacement_, at + replacement_.size())) {
        matches.emplace_back(at, at + replacement_.size());
      }
      split_piece(replaced, matches, false, Behavior::kMergedWithNext, out);
    }
    pieces = std::move(out);
  }

 private:
  std::string replacement_;
  PrependScheme scheme_ = PrependScheme::kAlways;
  bool split_ = true;
};

class DigitsPreTokenizer final : public PreTokenizer {
 public:
  DigitsPreTokenizer(const json& node, const std::string& file, const std::string& field)
      : individual_(Fields{node, file, field}.flag("individual_digits", false)), regex_(R"(\p{N})", file, field) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    std::vector<Piece> out;
    for (const Piece& p : pieces) {
      split_piece(p, regex_.find_all(p.text), false, individual_ ? Behavior::kIsolated : Behavior::kContiguous, out);
    }
    pieces = std::move(out);
  }

 private:
  bool individual_;
  Regex regex_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> stages) : stages_(std::move(stages)) {}
  void pre_tokenize(std::vector<Piece>& pieces) const override {
    for (const auto& stage : stages_) stage->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> stages_;
};

// ---- decoders -------------------------------------------------------------------------------

class ByteLevelDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      std::string mapped;
      bool all = true;
      for (std::size_t at = 0; at < token.size() && all; at += utf8_char_len(token, at)) {
        const auto b = byte_level_byte(utf8_decode_at(token, at));
        if (b) mapped += static_cast<char>(*b);
        else all = false;
      }
      bytes += all ? mapped : token;
    }
    return {utf8_repair(bytes)};
  }
};

class ReplaceDecoder final : public Decoder {
 public:
  ReplaceDecoder(const json& node, const std::string& file, const std::string& field)
      : pattern_(Fields{node, file, field}.required("pattern"), file, field + ".pattern"),
        content_(Fields{node, file, field}.string("content")) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) t = replace_all(t, pattern_, content_);
    return tokens;
  }

 private:
  Pattern pattern_;
  std::string content_;
};

std::optional<std::uint8_t> byte_token(const std::string& t) {
  // "<0xXX>" with two upper- or lower-case hex digits
  if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return std::nullopt;
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(t[3]), lo = hex(t[4]);
  if (hi < 0 || lo < 0) return std::nullopt;
  return static_cast<std::uint8_t>(hi * 16 + lo);
}

class ByteFallbackDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    std::size_t count = 0;
    auto flush = [&] {
      if (count == 0) return;
      if (utf8_repair(bytes) == bytes) {
        out.push_back(bytes);
      } else {
        for (std::size_t i = 0; i < count; ++i) out.emplace_back("\xEF\xBF\xBD");
      }
      bytes.clear();
      count = 0;
    };
    for (std::string& t : tokens) {
      if (const auto b = byte_token(t)) {
        bytes += static_cast<char>(*b);
        ++count;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    return out;
  }
};

class FuseDecoder final : public Decoder {
 public:
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    return {all};
  }
};

class StripDecoder final : public Decoder {
 public:
  StripDecoder(const json& node, const std::string& file, const std::string& field) {
    const Fields f{node, file, field};
    content_ = f.one_char("content");
    start_ = f.count("start", 0);
    stop_ = f.count("stop", 0);
  }
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::size_t> starts;  // byte offset of each character
      for (std::size_t at = 0; at < t.size(); at += utf8_char_len(t, at)) starts.push_back(at);
      auto is_content = [&](std::size_t i) { return t.compare(starts[i], content_.size(), content_) == 0 &&
                                                    (i + 1 == starts.size() ? t.size() : starts[i + 1]) - starts[i] == content_.size(); };
      std::size_t first = 0;
      while (first < std::min(start_, starts.size()) && is_content(first)) ++first;
      std::size_t last = starts.size();  // one past the last kept character
      for (std::size_t k = 0; k < stop_ && last > first && is_content(last - 1); ++k) --last;
      const std::size_t from = first < starts.size() ? starts[first] : t.size();
      const std::size_t to = last < starts.size() ? starts[last] : t.size();
      t = from < to ? t.substr(from, to - from) : std::string();
    }
    return tokens;
  }

 private:
  std::string content_;
  std::size_t start_ = 0, stop_ = 0;
};

class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(const json& node, const std::string& file, const std::string& field) {
    const Fields f{node, file, field};
    replacement_ = f.one_char("replacement");
    const auto it = node.find("prepend_scheme");
    if (it != node.end() && !it->is_null()) {
      const std::string s = f.string("prepend_scheme");
      if (s != "always" && s != "never" && s != "first") throw input_error(file, f.at("prepend_scheme"), "\"{}\" is not always, never or first", s);
      strip_first_ = s != "never";
    } else {
      strip_first_ = f.flag("add_prefix_space", true);
    }
  }
  // As tokenizers: every replacement character becomes a space, except in the first token
  // (when a prefix was prepended) where they are dropped.
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& t = tokens[i];
      for (std::size_t at = 0; at < t.size();) {
        if (t.compare(at, replacement_.size(), replacement_) == 0) {
          if (!(i == 0 && strip_first_)) out += ' ';
          at += replacement_.size();
        } else {
          out += t[at++];
        }
      }
      tokens[i] = std::move(out);
    }
    return tokens;
  }

 private:
  std::string replacement_;
  bool strip_first_ = true;
};

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> stages) : stages_(std::move(stages)) {}
  std::vector<std::string> decode_chain(std::vector<std::string> tokens) const override {
    for (const auto& stage : stages_) tokens = stage->decode_chain(std::move(tokens));
    return tokens;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> stages_;
};

constexpr std::size_t kMaxNesting = 16;

template <typename Stage, typename Make>
std::vector<std::unique_ptr<Stage>> make_list(const json& list, const std::string& file, const std::string& field, Make make) {
  if (!list.is_array()) throw input_error(file, field, "must be an array");
  std::vector<std::unique_ptr<Stage>> stages;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string at = fmt::format("{}[{}]", field, i);
    if (list[i].is_null()) throw input_error(file, at, "must be an object, got null");
    stages.push_back(make(list[i], file, at));
  }
  return stages;
}

void check_depth(const std::string& file, const std::string& field) {
  if (static_cast<std::size_t>(std::count(field.begin(), field.end(), '[')) > kMaxNesting) {
    throw input_error(file, field, "Sequence nested more than {} deep", kMaxNesting);
  }
}

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const json& node, const std::string& file, const std::string& field) {
  if (node.is_null()) return nullptr;
  check_depth(file, field);
  const std::string type = type_of(node, file, field);
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfc);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfd);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkc);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(NormalForm::kNfkd);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(Fields{node, file, field}.string("prepend"));
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(node, file, field);
  if (type == "Sequence") {
    const Fields f{node, file, field};
    return std::make_unique<SequenceNormalizer>(
        make_list<Normalizer>(array_field(f, "normalizers"), file, f.at("normalizers"), make_normalizer));
  }
  throw input_error(file, field + ".type", "normalizer \"{}\" is not supported (kvcheck reads NFC, NFD, NFKC, NFKD, "
                    "Prepend, Replace and Sequence)", type);
}

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const json& node, const std::string& file, const std::string& field) {
  if (node.is_null()) return nullptr;
  check_depth(file, field);
  const std::string type = type_of(node, file, field);
  if (type == "Split") return std::make_unique<SplitPreTokenizer>(node, file, field);
  if (type == "ByteLevel") return std::make_unique<ByteLevelPreTokenizer>(node, file, field);
  if (type == "Metaspace") return std::make_unique<MetaspacePreTokenizer>(node, file, field);
  if (type == "Digits") return std::make_unique<DigitsPreTokenizer>(node, file, field);
  if (type == "Sequence") {
    const Fields f{node, file, field};
    return std::make_unique<SequencePreTokenizer>(
        make_list<PreTokenizer>(array_field(f, "pretokenizers"), file, f.at("pretokenizers"), make_pre_tokenizer));
  }
  throw input_error(file, field + ".type", "pre-tokenizer \"{}\" is not supported (kvcheck reads Split, ByteLevel, "
                    "Metaspace, Digits and Sequence)", type);
}

std::unique_ptr<Decoder> make_decoder(const json& node, const std::string& file, const std::string& field) {
  if (node.is_null()) return nullptr;
  check_depth(file, field);
  const std::string type = type_of(node, file, field);
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(node, file, field);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip") return std::make_unique<StripDecoder>(node, file, field);
  if (type == "Metaspace") return std::make_unique<MetaspaceDecoder>(node, file, field);
  if (type == "Sequence") {
    const Fields f{node, file, field};
    return std::make_unique<SequenceDecoder>(
        make_list<Decoder>(array_field(f, "decoders"), file, f.at("decoders"), make_decoder));
  }
  throw input_error(file, field + ".type", "decoder \"{}\" is not supported (kvcheck reads ByteLevel, Metaspace, "
                    "Replace, ByteFallback, Fuse, Strip and Sequence)", type);
}

}  // namespace kvcheck::tokjson
