// The text stages of a tokenizer.json around its model: normalizer, pre-tokenizer and decoder,
// each built from its JSON object (as tokenizers defines them). Unknown types and bad fields are
// InputErrors naming the file and the field.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace kvcheck::tokjson {

// A piece of text on its way to the model. at_origin: it starts at offset 0 of the input (what
// Metaspace's prepend_scheme "first" asks).
struct Piece {
  std::string text;
  bool at_origin = false;
};

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Splits and rewrites `pieces` in place; empty pieces are dropped.
  virtual void pre_tokenize(std::vector<Piece>& pieces) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  // tokenizers' decode_chain: tokens in, tokens out (joined by the caller).
  virtual std::vector<std::string> decode_chain(std::vector<std::string> tokens) const = 0;
};

// `node` is the JSON value at `field` (e.g. "normalizer"); null gives nullptr (no stage).
std::unique_ptr<Normalizer> make_normalizer(const nlohmann::json& node, const std::string& file, const std::string& field);
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const nlohmann::json& node, const std::string& file, const std::string& field);
std::unique_ptr<Decoder> make_decoder(const nlohmann::json& node, const std::string& file, const std::string& field);

}  // namespace kvcheck::tokjson
