#include "reference/tokenizer_json_bpe.h"

#include <queue>

#include <fmt/format.h>

#include "reference/errors.h"
#include "reference/tokenizer_json_text.h"

namespace kvcheck::tokjson {
namespace {

using nlohmann::json;

constexpr std::size_t kCacheWords = 1 << 16;       // cleared when full
constexpr std::size_t kCacheMaxWordBytes = 256;    // longer words are not cached

std::uint64_t pair_key(std::int32_t a, std::int32_t b) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(a)) << 32) | static_cast<std::uint32_t>(b);
}

// A field that may be absent or null; otherwise must hold `check`'s type.
const json* optional_field(const json& obj, const char* key) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

}  // namespace

BpeModel::BpeModel(const json& model, const std::string& file) {
  for (auto& id : byte_ids_) id = -1;
  // Options kvcheck does not implement are refused, never ignored.
  if (const json* dropout = optional_field(model, "dropout")) {
    if (!dropout->is_number() || dropout->get<double>() != 0.0) {
      throw input_error(file, "model.dropout", "BPE dropout {} is not supported (kvcheck encodes deterministically)",
                        dropout->dump());
    }
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (const json* v = optional_field(model, key)) {
      if (!v->is_string()) throw input_error(file, fmt::format("model.{}", key), "must be a string or null");
      if (!v->get<std::string>().empty()) {
        throw input_error(file, fmt::format("model.{}", key), "{} is not supported (kvcheck reads byte-level and "
                          "SentencePiece-style BPE)", v->dump());
      }
    }
  }
  auto flag = [&](const char* key) {
    const json* v = optional_field(model, key);
    if (v == nullptr) return false;
    if (!v->is_boolean()) throw input_error(file, fmt::format("model.{}", key), "must be true or false, got {}", v->dump());
    return v->get<bool>();
  };
  fuse_unk_ = flag("fuse_unk");
  byte_fallback_ = flag("byte_fallback");
  ignore_merges_ = flag("ignore_merges");

  const auto vocab_it = model.find("vocab");
  if (vocab_it == model.end()) throw input_error(file, "model.vocab", "missing");
  if (!vocab_it->is_object()) throw input_error(file, "model.vocab", "must be an object of token -> id");
  if (static_cast<std::int64_t>(vocab_it->size()) > kMaxTokenId + 1) {
    throw input_error(file, "model.vocab", "{} tokens: more than kvcheck's limit of {}", vocab_it->size(), kMaxTokenId + 1);
  }
  vocab_.reserve(vocab_it->size());
  std::vector<bool> seen;
  for (const auto& [token, value] : vocab_it->items()) {
    if (!value.is_number_integer()) {
      throw input_error(file, fmt::format("model.vocab[{}]", json(token).dump()), "the id must be an integer, got {}", value.dump());
    }
    const auto id = value.get<std::int64_t>();
    if (id < 0 || id > kMaxTokenId) {
      throw input_error(file, fmt::format("model.vocab[{}]", json(token).dump()), "id {} is outside [0, {}]", id, kMaxTokenId);
    }
    if (static_cast<std::size_t>(id) >= seen.size()) seen.resize(static_cast<std::size_t>(id) + 1, false);
    if (seen[static_cast<std::size_t>(id)]) {
      throw input_error(file, fmt::format("model.vocab[{}]", json(token).dump()), "id {} is given to two tokens", id);
    }
    seen[static_cast<std::size_t>(id)] = true;
    vocab_.emplace(token, static_cast<std::int32_t>(id));
    max_id_ = std::max(max_id_, static_cast<std::int32_t>(id));
  }

  if (const json* unk = optional_field(model, "unk_token")) {
    if (!unk->is_string()) throw input_error(file, "model.unk_token", "must be a string or null");
    const auto it = vocab_.find(unk->get<std::string>());
    if (it == vocab_.end()) throw input_error(file, "model.unk_token", "{} is not in model.vocab", unk->dump());
    unk_id_ = it->second;
  }
  if (byte_fallback_) {
    for (int b = 0; b < 256; ++b) {
      const auto it = vocab_.find(fmt::format("<0x{:02X}>", b));
      if (it != vocab_.end()) byte_ids_[b] = it->second;
    }
  }

  const auto merges_it = model.find("merges");
  if (merges_it == model.end()) throw input_error(file, "model.merges", "missing");
  if (!merges_it->is_array()) throw input_error(file, "model.merges", "must be an array");
  merges_.reserve(merges_it->size());
  std::int32_t rank = 0;
  for (const auto& merge : *merges_it) {
    const std::string field = fmt::format("model.merges[{}]", rank);
    std::string left, right;
    if (merge.is_string()) {
      const auto& s = merge.get_ref<const std::string&>();
      const auto space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos) {
        throw input_error(file, field, "{} is not two tokens separated by one space", merge.dump());
      }
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() && merge[1].is_string()) {
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      throw input_error(file, field, "must be \"a b\" or [\"a\", \"b\"], got {}", merge.dump());
    }
    auto id_of = [&](const std::string& token) {
      const auto it = vocab_.find(token);
      if (it == vocab_.end()) throw input_error(file, field, "token {} is not in model.vocab", json(token).dump());
      return it->second;
    };
    const std::int32_t a = id_of(left);
    const std::int32_t b = id_of(right);
    const std::int32_t merged = id_of(left + right);
    merges_[pair_key(a, b)] = {rank, merged};  // a repeated pair: the later rank wins, as in tokenizers
    ++rank;
  }
}

void BpeModel::tokenize(std::string_view word, std::vector<std::int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out.push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    const auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<std::int32_t> ids;
  merge_word(word, ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard lock(cache_mutex_);
    if (cache_.size() >= kCacheWords) cache_.clear();
    cache_.emplace(std::string(word), std::move(ids));
  }
}

// tokenizers' BPE::merge_word + Word::merge_all: one symbol per character (or its <0xXX> bytes,
// or unk), then repeatedly the pair of lowest rank (leftmost on ties) is merged.
void BpeModel::merge_word(std::string_view word, std::vector<std::int32_t>& out) const {
  struct Symbol {
    std::int32_t id;
    int prev;
    int next;
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](std::int32_t id) {
    const int index = static_cast<int>(symbols.size());
    symbols.push_back({id, index - 1, index + 1, true});
  };
  bool pending_unk = false;
  for (std::size_t at = 0; at < word.size();) {
    const std::size_t len = utf8_char_len(word, at);
    const std::string_view ch = word.substr(at, std::min(len, word.size() - at));
    at += len;
    if (const auto it = vocab_.find(ch); it != vocab_.end()) {
      if (pending_unk) add(unk_id_), pending_unk = false;
      add(it->second);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (char c : ch) all = all && byte_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : ch) add(byte_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk && !fuse_unk_) add(unk_id_);
      pending_unk = true;
    }
  }
  if (pending_unk) add(unk_id_);
  if (symbols.empty()) return;
  symbols.back().next = -1;

  struct Candidate {
    std::int32_t rank;
    int pos;
    std::int32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto push_pair = [&](int left) {
    const int right = symbols[static_cast<std::size_t>(left)].next;
    if (right < 0) return;
    const auto it = merges_.find(pair_key(symbols[static_cast<std::size_t>(left)].id, symbols[static_cast<std::size_t>(right)].id));
    if (it != merges_.end()) queue.push({it->second.first, left, it->second.second});
  };
  for (int i = 0; i + 1 < static_cast<int>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[static_cast<std::size_t>(top.pos)];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    const auto it = merges_.find(pair_key(left.id, right.id));
    if (it == merges_.end() || it->second.second != top.merged) continue;  // a stale entry
    left.id = top.merged;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) symbols[static_cast<std::size_t>(left.next)].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (const Symbol& s : symbols) {
    if (s.alive) out.push_back(s.id);
  }
}

}  // namespace kvcheck::tokjson
