// The BPE model of a tokenizer.json (tokenizers' models::bpe): vocabulary, merge ranks in a
// hash map, byte fallback, unk fusing, ignore_merges, and a per-word cache.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvcheck::tokjson {

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, std::int32_t, StringHash, std::equal_to<>>;

// The largest id kvcheck accepts (a "huge vocabulary" is refused, not allocated).
inline constexpr std::int64_t kMaxTokenId = (std::int64_t{1} << 22) - 1;

class BpeModel {
 public:
  // `model` is tokenizer.json's "model" object; errors name `file` and the field (model.vocab...).
  BpeModel(const nlohmann::json& model, const std::string& file);

  // Appends the ids of one pre-tokenized word.
  void tokenize(std::string_view word, std::vector<std::int32_t>& out) const;

  const Vocab& vocab() const { return vocab_; }
  std::int32_t max_id() const { return max_id_; }

 private:
  void merge_word(std::string_view word, std::vector<std::int32_t>& out) const;

  Vocab vocab_;
  std::int32_t max_id_ = -1;
  // (left id << 32 | right id) -> (rank, merged id)
  std::unordered_map<std::uint64_t, std::pair<std::int32_t, std::int32_t>> merges_;
  std::int32_t unk_id_ = -1;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  std::int32_t byte_ids_[256];  // <0xXX> tokens, -1 when missing

  mutable std::mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<std::int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace kvcheck::tokjson
