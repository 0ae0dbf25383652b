// Hugging Face tokenizer.json behind reference/tokenizer.h: added tokens, normalizer,
// pre-tokenizer, BPE model, post-processor and decoder, read as tokenizers applies them; BOS/EOS
// from tokenizer_config.json / generation_config.json as transformers does.
//
// Invalid UTF-8 input: each ill-formed sequence becomes one U+FFFD (its maximal subpart, as
// Python's bytes.decode("utf-8", errors="replace") turns bytes into the str that tokenizers
// receives); encode never throws for content.
#include <algorithm>
#include <fstream>
#include <sstream>
#include <system_error>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "reference/errors.h"
#include "reference/tokenizer_backend.h"
#include "reference/tokenizer_json_bpe.h"
#include "reference/tokenizer_json_pipeline.h"
#include "reference/tokenizer_json_text.h"

namespace kvcheck {
namespace {

using nlohmann::json;
using tokjson::Piece;

constexpr std::uintmax_t kMaxFileBytes = std::uintmax_t{1} << 30;

json read_json(const std::filesystem::path& file, const std::string& what) {
  const std::string origin = file.string();
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) throw input_error(origin, what, "file not found");
  if (std::filesystem::is_directory(file, ec)) throw input_error(origin, what, "is a directory, not a JSON file");
  const auto size = std::filesystem::file_size(file, ec);
  if (!ec && size > kMaxFileBytes) throw input_error(origin, what, "{} bytes: larger than kvcheck's limit of 1 GiB", size);
  std::ifstream in(file, std::ios::binary);
  if (!in) throw input_error(origin, what, "cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    throw input_error(origin, what, "not valid JSON: {}", e.what());
  }
}

struct AddedToken {
  std::string content;
  std::int32_t id = -1;
  bool single_word = false, lstrip = false, rstrip = false, normalized = false, special = false;
};

// Leftmost-longest matching of added tokens (tokenizers' AddedVocabulary with its aho-corasick
// LeftmostLongest automaton), with single_word / lstrip / rstrip as find_matches applies them.
class AddedTokenMatcher {
 public:
  void add(const AddedToken* token) {
    if (token->content.empty()) return;
    by_first_byte_[static_cast<unsigned char>(token->content[0])].push_back(token);
  }
  void finish() {
    for (auto& list : by_first_byte_) {
      std::stable_sort(list.begin(), list.end(),
                       [](const AddedToken* a, const AddedToken* b) { return a->content.size() > b->content.size(); });
    }
  }
  bool empty() const {
    return std::all_of(std::begin(by_first_byte_), std::end(by_first_byte_), [](const auto& l) { return l.empty(); });
  }

  // Splits `piece` into text pieces (id -1) and added tokens.
  void split(const Piece& piece, std::vector<std::pair<Piece, std::int32_t>>& out) const {
    const std::string& s = piece.text;
    std::size_t emitted = 0;  // end of what has been emitted
    std::size_t at = 0;
    while (at < s.size()) {
      const AddedToken* match = nullptr;
      for (const AddedToken* t : by_first_byte_[static_cast<unsigned char>(s[at])]) {
        if (s.compare(at, t->content.size(), t->content) == 0) {
          match = t;
          break;
        }
      }
      if (match == nullptr) {
        ++at;
        continue;
      }
      std::size_t start = at, stop = at + match->content.size();
      at = stop;  // the automaton goes on after the match, whatever is done with it
      if (match->single_word) {
        const bool start_ok = start == 0 || !ends_with_word(std::string_view(s).substr(0, start));
        const bool stop_ok = stop == s.size() || !tokjson::is_unicode_alphanumeric(tokjson::utf8_decode_at(s, stop));
        if (!start_ok || !stop_ok) continue;
      }
      if (match->lstrip) {
        std::size_t left = start;
        while (left > 0) {
          std::size_t prev = left - 1;
          while (prev > 0 && (static_cast<unsigned char>(s[prev]) & 0xC0) == 0x80) --prev;
          if (!tokjson::is_unicode_whitespace(tokjson::utf8_decode_at(s, prev))) break;
          left = prev;
        }
        start = std::max(left, emitted);
      }
      if (match->rstrip) {
        while (stop < s.size() && tokjson::is_unicode_whitespace(tokjson::utf8_decode_at(s, stop))) {
          stop += tokjson::utf8_char_len(s, stop);
        }
        at = std::max(at, stop);
      }
      start = std::max(start, emitted);
      if (emitted < start) out.push_back({Piece{s.substr(emitted, start - emitted), piece.at_origin && emitted == 0}, -1});
      out.push_back({Piece{}, match->id});
      emitted = stop;
    }
    if (emitted < s.size()) out.push_back({Piece{s.substr(emitted), piece.at_origin && emitted == 0}, -1});
  }

 private:
  static bool ends_with_word(std::string_view s) {
    std::size_t prev = s.size() - 1;
    while (prev > 0 && (static_cast<unsigned char>(s[prev]) & 0xC0) == 0x80) --prev;
    return tokjson::is_unicode_alphanumeric(tokjson::utf8_decode_at(s, prev));
  }
  std::vector<const AddedToken*> by_first_byte_[256];
};

class TokenizerJsonBackend final : public TokenizerBackend {
 public:
  explicit TokenizerJsonBackend(const std::filesystem::path& file)
      : TokenizerJsonBackend(read_json(file, "tokenizer.json"), file.string(), "tokenizer.json") {
    read_configs(file.parent_path());
  }

  // A tokenizer.json held in memory (one built from a GGUF file's metadata): no config files
  // beside it; the caller names BOS and EOS.
  TokenizerJsonBackend(const json& root, std::string origin, std::string format)
      : origin_(std::move(origin)), format_(std::move(format)) {
    if (!root.is_object()) throw input_error(origin_, "tokenizer.json", "the top level must be a JSON object");
    auto field = [&](const char* key) -> const json& {
      static const json null_value;
      const auto it = root.find(key);
      return it == root.end() ? null_value : *it;
    };

    const json& model = field("model");
    if (!model.is_object()) throw input_error(origin_, "model", "missing or not an object");
    const auto type = model.find("type");
    if (type != model.end() && !type->is_string()) throw input_error(origin_, "model.type", "must be a string");
    const std::string model_type = type == model.end() ? "BPE" : type->get<std::string>();
    if (model_type != "BPE") {
      throw input_error(origin_, "model.type", "\"{}\" is not supported (kvcheck reads BPE)", model_type);
    }
    bpe_ = std::make_unique<tokjson::BpeModel>(model, origin_);

    for (const char* key : {"truncation", "padding"}) {
      if (!field(key).is_null()) throw input_error(origin_, key, "must be null (kvcheck neither truncates nor pads)");
    }
    normalizer_ = tokjson::make_normalizer(field("normalizer"), origin_, "normalizer");
    pre_tokenizer_ = tokjson::make_pre_tokenizer(field("pre_tokenizer"), origin_, "pre_tokenizer");
    decoder_ = tokjson::make_decoder(field("decoder"), origin_, "decoder");
    read_added_tokens(field("added_tokens"));
    build_id_table();
    read_post_processor(field("post_processor"), "post_processor", prefix_, suffix_);
  }

  void set_special_ids(std::int32_t bos, std::int32_t eos) {
    bos_id_ = bos;
    eos_id_ = eos;
  }

  std::vector<std::int32_t> encode(std::string_view text, bool add_bos) const override {
    const std::string input = tokjson::utf8_repair(text);
    std::vector<std::int32_t> ids;
    if (add_bos) ids = prefix_;
    // 1. added tokens matched on the raw text; 2. the rest normalized, then normalized added
    // tokens matched; 3. the rest pre-tokenized and run through the model.
    std::vector<std::pair<Piece, std::int32_t>> sections;
    raw_tokens_.split(Piece{input, true}, sections);
    for (auto& [section, id] : sections) {
      if (id >= 0) {
        ids.push_back(id);
        continue;
      }
      if (normalizer_) normalizer_->normalize(section.text);
      std::vector<std::pair<Piece, std::int32_t>> parts;
      if (normalized_tokens_.empty()) {
        parts.push_back({std::move(section), -1});
      } else {
        normalized_tokens_.split(section, parts);
      }
      for (auto& [part, part_id] : parts) {
        if (part_id >= 0) {
          ids.push_back(part_id);
          continue;
        }
        if (part.text.empty()) continue;
        std::vector<Piece> pieces{std::move(part)};
        if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(pieces);
        for (const Piece& p : pieces) bpe_->tokenize(p.text, ids);
      }
    }
    if (add_bos) ids.insert(ids.end(), suffix_.begin(), suffix_.end());
    return ids;
  }

  std::string decode(std::span<const std::int32_t> ids) const override {
    std::vector<std::string> tokens;
    tokens.reserve(ids.size());
    for (const std::int32_t id : ids) {
      const auto i = static_cast<std::size_t>(id);
      if (i >= id_to_token_.size() || !has_token_[i] || is_special_[i]) continue;
      tokens.push_back(id_to_token_[i]);
    }
    if (!decoder_) {
      std::string joined;
      for (std::size_t i = 0; i < tokens.size(); ++i) joined += (i ? " " : "") + tokens[i];
      return joined;
    }
    std::string text;
    for (const std::string& t : decoder_->decode_chain(std::move(tokens))) text += t;
    return text;
  }

  std::int32_t bos_id() const override { return bos_id_; }
  std::int32_t eos_id() const override { return eos_id_; }
  std::int32_t vocab_size() const override { return static_cast<std::int32_t>(id_to_token_.size()); }
  std::string_view format() const override { return format_; }

 private:
  void read_added_tokens(const json& list) {
    if (list.is_null()) return;
    if (!list.is_array()) throw input_error(origin_, "added_tokens", "must be an array");
    added_.reserve(list.size());
    for (std::size_t i = 0; i < list.size(); ++i) {
      const std::string at = fmt::format("added_tokens[{}]", i);
      const json& t = list[i];
      if (!t.is_object()) throw input_error(origin_, at, "must be an object");
      AddedToken token;
      const auto id = t.find("id");
      if (id == t.end() || !id->is_number_integer()) throw input_error(origin_, at + ".id", "missing or not an integer");
      const auto value = id->get<std::int64_t>();
      if (value < 0 || value > tokjson::kMaxTokenId) {
        throw input_error(origin_, at + ".id", "id {} is outside [0, {}]", value, tokjson::kMaxTokenId);
      }
      token.id = static_cast<std::int32_t>(value);
      const auto content = t.find("content");
      if (content == t.end() || !content->is_string()) throw input_error(origin_, at + ".content", "missing or not a string");
      token.content = content->get<std::string>();
      auto flag = [&](const char* key, bool fallback) {
        const auto it = t.find(key);
        if (it == t.end()) return fallback;
        if (!it->is_boolean()) throw input_error(origin_, fmt::format("{}.{}", at, key), "must be true or false");
        return it->get<bool>();
      };
      token.single_word = flag("single_word", false);
      token.lstrip = flag("lstrip", false);
      token.rstrip = flag("rstrip", false);
      token.special = flag("special", false);
      token.normalized = flag("normalized", !token.special);
      for (const AddedToken& other : added_) {
        if (other.id == token.id && other.content != token.content) {
          throw input_error(origin_, at + ".id", "id {} is also given to added token {}", token.id, json(other.content).dump());
        }
      }
      added_.push_back(std::move(token));
    }
    normalized_copies_.reserve(added_.size());  // stable: the matcher points into it
    for (AddedToken& token : added_) {
      if (token.normalized && normalizer_) {
        // matched by its normalized content, as tokenizers' split_normalized_trie
        AddedToken copy = token;
        copy.content = tokjson::utf8_repair(token.content);
        normalizer_->normalize(copy.content);
        normalized_copies_.push_back(std::move(copy));
        normalized_tokens_.add(&normalized_copies_.back());
      } else if (token.normalized) {
        normalized_tokens_.add(&token);
      } else {
        raw_tokens_.add(&token);
      }
    }
    raw_tokens_.finish();
    normalized_tokens_.finish();
  }

  void build_id_table() {
    std::int32_t max_id = bpe_->max_id();
    for (const AddedToken& t : added_) max_id = std::max(max_id, t.id);
    if (max_id < 0) throw input_error(origin_, "model.vocab", "the vocabulary is empty");
    const auto n = static_cast<std::size_t>(max_id) + 1;
    id_to_token_.assign(n, std::string());
    has_token_.assign(n, false);
    is_special_.assign(n, false);
    for (const auto& [token, id] : bpe_->vocab()) {
      id_to_token_[static_cast<std::size_t>(id)] = token;
      has_token_[static_cast<std::size_t>(id)] = true;
    }
    for (const AddedToken& t : added_) {
      id_to_token_[static_cast<std::size_t>(t.id)] = t.content;
      has_token_[static_cast<std::size_t>(t.id)] = true;
      is_special_[static_cast<std::size_t>(t.id)] = t.special;
    }
  }

  // The id of a token given by its text (added tokens first, as tokenizers' token_to_id).
  std::optional<std::int32_t> token_id(const std::string& token) const {
    for (const AddedToken& t : added_) {
      if (t.content == token) return t.id;
    }
    const auto it = bpe_->vocab().find(token);
    if (it == bpe_->vocab().end()) return std::nullopt;
    return it->second;
  }

  // What the post-processor adds around a single sequence with add_special_tokens.
  void read_post_processor(const json& node, const std::string& field, std::vector<std::int32_t>& prefix,
                           std::vector<std::int32_t>& suffix) {
    if (node.is_null()) return;
    if (!node.is_object()) throw input_error(origin_, field, "must be an object or null");
    const auto type_it = node.find("type");
    if (type_it == node.end() || !type_it->is_string()) throw input_error(origin_, field + ".type", "missing or not a string");
    const std::string type = type_it->get<std::string>();
    if (type == "ByteLevel") return;  // offsets only
    if (type == "Sequence") {
      if (std::count(field.begin(), field.end(), '[') > 16) throw input_error(origin_, field, "nested too deep");
      const auto list = node.find("processors");
      if (list == node.end() || !list->is_array()) throw input_error(origin_, field + ".processors", "missing or not an array");
      for (std::size_t i = 0; i < list->size(); ++i) {
        std::vector<std::int32_t> p, s;
        read_post_processor((*list)[i], fmt::format("{}.processors[{}]", field, i), p, s);
        prefix.insert(prefix.begin(), p.begin(), p.end());
        suffix.insert(suffix.end(), s.begin(), s.end());
      }
      return;
    }
    if (type != "TemplateProcessing") {
      throw input_error(origin_, field + ".type", "post-processor \"{}\" is not supported (kvcheck reads "
                        "TemplateProcessing, ByteLevel and Sequence)", type);
    }
    const auto specials = node.find("special_tokens");
    if (specials == node.end() || !specials->is_object()) {
      throw input_error(origin_, field + ".special_tokens", "missing or not an object");
    }
    const auto single = node.find("single");
    if (single == node.end() || !single->is_array()) throw input_error(origin_, field + ".single", "missing or not an array");
    bool seen_sequence = false;
    for (std::size_t i = 0; i < single->size(); ++i) {
      const std::string at = fmt::format("{}.single[{}]", field, i);
      const json& item = (*single)[i];
      if (!item.is_object() || item.size() != 1) throw input_error(origin_, at, "must be {{\"SpecialToken\": ...}} or {{\"Sequence\": ...}}");
      const std::string kind = item.begin().key();
      const json& body = item.begin().value();
      if (!body.is_object() || !body.contains("id") || !body["id"].is_string()) {
        throw input_error(origin_, at + "." + kind + ".id", "missing or not a string");
      }
      const std::string name = body["id"].get<std::string>();
      if (kind == "Sequence") {
        if (name != "A" || seen_sequence) throw input_error(origin_, at, "a single-sequence template holds sequence A once");
        seen_sequence = true;
      } else if (kind == "SpecialToken") {
        const auto entry = specials->find(name);
        if (entry == specials->end()) throw input_error(origin_, at, "special token {} is not in {}.special_tokens", json(name).dump(), field);
        const auto ids = entry->find("ids");
        const std::string ids_field = fmt::format("{}.special_tokens[{}].ids", field, json(name).dump());
        if (ids == entry->end() || !ids->is_array()) throw input_error(origin_, ids_field, "missing or not an array");
        for (const json& id : *ids) {
          if (!id.is_number_integer() || id.get<std::int64_t>() < 0 ||
              id.get<std::int64_t>() >= static_cast<std::int64_t>(id_to_token_.size())) {
            throw input_error(origin_, ids_field, "{} is not an id of this vocabulary [0, {})", id.dump(), id_to_token_.size());
          }
          (seen_sequence ? suffix : prefix).push_back(id.get<std::int32_t>());
        }
      } else {
        throw input_error(origin_, at, "\"{}\" is not SpecialToken or Sequence", kind);
      }
    }
    if (!seen_sequence) throw input_error(origin_, field + ".single", "has no Sequence A");
  }

  // A token named in a config file: a string or an AddedToken object {"content": ...}; nullopt
  // for null. InputError when it is not in the vocabulary.
  std::optional<std::int32_t> config_token(const json& value, const std::string& file, const std::string& key) const {
    if (value.is_null()) return std::nullopt;
    std::string content;
    if (value.is_string()) {
      content = value.get<std::string>();
    } else if (value.is_object() && value.contains("content") && value["content"].is_string()) {
      content = value["content"].get<std::string>();
    } else {
      throw input_error(file, key, "must be a token string, an object with \"content\", or null; got {}", value.dump());
    }
    const auto id = token_id(content);
    if (!id) throw input_error(file, key, "{} is not a token of {}", json(content).dump(), origin_);
    return id;
  }

  // tokenizer_config.json (bos_token, eos_token, add_bos_token, add_eos_token) and
  // generation_config.json (eos_token_id) as transformers applies them.
  void read_configs(const std::filesystem::path& dir) {
    std::error_code ec;
    const auto config_file = dir / "tokenizer_config.json";
    const auto generation_file = dir / "generation_config.json";
    json config = json::object();
    if (std::filesystem::exists(config_file, ec)) {
      config = read_json(config_file, "tokenizer_config.json");
      if (!config.is_object()) throw input_error(config_file.string(), "tokenizer_config.json", "the top level must be a JSON object");
    }
    const std::string cfg = config_file.string();
    std::string tokenizer_class;
    if (const auto it = config.find("tokenizer_class"); it != config.end() && !it->is_null()) {
      if (!it->is_string()) throw input_error(cfg, "tokenizer_class", "must be a string");
      tokenizer_class = it->get<std::string>();
      if (tokenizer_class.size() > 4 && tokenizer_class.ends_with("Fast")) tokenizer_class.resize(tokenizer_class.size() - 4);
    }
    // LlamaTokenizerFast and its kin rebuild the post-processor from add_bos_token /
    // add_eos_token (defaults true / false) with bos_token / eos_token (defaults <s> / </s>).
    const bool llama_style = tokenizer_class == "LlamaTokenizer" || tokenizer_class == "CodeLlamaTokenizer" ||
                             tokenizer_class == "GemmaTokenizer";
    auto token_field = [&](const char* key, const char* llama_default) -> std::optional<std::int32_t> {
      const auto it = config.find(key);
      if (it != config.end()) return config_token(*it, cfg, key);
      if (llama_style) return config_token(json(llama_default), cfg, key);
      return std::nullopt;
    };
    const auto bos = token_field("bos_token", "<s>");
    const auto eos = token_field("eos_token", "</s>");
    if (bos) bos_id_ = *bos;
    if (eos) eos_id_ = *eos;
    const bool bos_in_config = config.contains("bos_token");
    if (llama_style) {
      auto flag = [&](const char* key, bool fallback) {
        const auto it = config.find(key);
        if (it == config.end() || it->is_null()) return fallback;
        if (!it->is_boolean()) throw input_error(cfg, key, "must be true or false, got {}", it->dump());
        return it->get<bool>();
      };
      const bool add_bos = flag("add_bos_token", true);
      const bool add_eos = flag("add_eos_token", false);
      if (add_bos && !bos) throw input_error(cfg, "add_bos_token", "is true but bos_token is null");
      if (add_eos && !eos) throw input_error(cfg, "add_eos_token", "is true but eos_token is null");
      prefix_.clear();
      suffix_.clear();
      if (add_bos) prefix_.push_back(*bos);
      if (add_eos) suffix_.push_back(*eos);
    }
    // Without a bos_token entry, the token the post-processor puts first is the BOS.
    if (!bos_in_config && !llama_style && !prefix_.empty()) bos_id_ = prefix_.front();
    if (eos_id_ < 0 && std::filesystem::exists(generation_file, ec)) {
      const json gen = read_json(generation_file, "generation_config.json");
      const std::string gfile = generation_file.string();
      if (!gen.is_object()) throw input_error(gfile, "generation_config.json", "the top level must be a JSON object");
      if (const auto it = gen.find("eos_token_id"); it != gen.end() && !it->is_null()) {
        const json& first = it->is_array() && !it->empty() ? (*it)[0] : *it;
        if (!first.is_number_integer() || first.get<std::int64_t>() < 0 ||
            first.get<std::int64_t>() >= static_cast<std::int64_t>(id_to_token_.size())) {
          throw input_error(gfile, "eos_token_id", "{} is not an id of {} [0, {})", it->dump(), origin_, id_to_token_.size());
        }
        eos_id_ = first.get<std::int32_t>();
      }
    }
  }

  std::string origin_;
  std::string format_;
  std::unique_ptr<tokjson::BpeModel> bpe_;
  std::unique_ptr<tokjson::Normalizer> normalizer_;
  std::unique_ptr<tokjson::PreTokenizer> pre_tokenizer_;
  std::unique_ptr<tokjson::Decoder> decoder_;
  std::vector<AddedToken> added_;  // stable: the matchers point into it
  std::vector<AddedToken> normalized_copies_;
  AddedTokenMatcher raw_tokens_;         // normalized: false, matched on the input
  AddedTokenMatcher normalized_tokens_;  // normalized: true, matched after the normalizer
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  std::vector<bool> is_special_;
  std::vector<std::int32_t> prefix_, suffix_;  // what add_bos adds
  std::int32_t bos_id_ = -1;
  std::int32_t eos_id_ = -1;
};

}  // namespace

std::unique_ptr<TokenizerBackend> load_tokenizer_json_backend(const std::filesystem::path& file) {
  return std::make_unique<TokenizerJsonBackend>(file);
}

std::unique_ptr<TokenizerBackend> make_tokenizer_json_backend(const nlohmann::json& root, const std::string& origin,
                                                              std::int32_t bos_id, std::int32_t eos_id,
                                                              const std::string& format) {
  auto backend = std::make_unique<TokenizerJsonBackend>(root, origin, format);
  backend->set_special_ids(bos_id, eos_id);
  return backend;
}

}  // namespace kvcheck
