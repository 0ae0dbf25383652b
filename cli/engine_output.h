// Another engine's outputs on an items file (cli/items_file.h), as kvcheck compare reads them
// (docs/reports.md, "Checking another engine"). PATH is one of:
//   DIR/             ITEM_ID.npy per text item: float32 or float16 logits [continuation tokens, vocab]
//                    (C order, little-endian; row i predicts continuation token i), and any *.jsonl
//                    (below) for the retrieval items' generated ids or top-k rows; *.safetensors too;
//   FILE.safetensors one tensor per item, named by its id: F32/F16/BF16 [positions, vocab] logits
//                    for a text item, I32/I64 [n] generated ids for a retrieval item;
//   FILE.jsonl       one object per line: {"id": ID, "top_logprobs": [{"TOKEN": logprob, ...}, ...]}
//                    (per continuation position, k >= 1 entries, as vLLM's prompt_logprobs: the
//                    continuation token itself among them), and/or {"id": ID, "generated_ids": [...]}.
// Parsers refuse (InputError naming the file, the item and the position) what cannot be a model's
// output: NaN or infinite logits, log-probabilities above 0 or whose probabilities sum above
// 1 + 1e-3, a malformed file, an item given twice. Whether the items are the exported ones, with
// the right number of positions and vocabulary, is checked against the items by engine_compare.h.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kvcheck::cli {

// One log-probability of a top-k row.
struct TopkEntry {
  std::int32_t token = 0;
  double logprob = 0.0;
};

struct EngineItem {
  std::string source;  // the file (and line) it came from, for messages
  // Full logits, row-major [positions][vocab] (empty when the item has top-k rows or none).
  std::int64_t positions = 0, vocab = 0;
  std::vector<float> logits;
  std::vector<std::vector<TopkEntry>> topk;  // per position; empty for full logits
  std::optional<std::vector<std::int32_t>> generated;
};

struct EngineOutput {
  std::filesystem::path path;
  std::map<std::string, EngineItem> items;  // by item id
};

// A 2-D float32/float16 .npy array, as float. InputError naming the file and the header field or
// the row holding a NaN/Inf (`what` names the item in messages).
struct LogitsArray {
  std::int64_t rows = 0, cols = 0;
  std::vector<float> data;
};
LogitsArray read_logits_npy(const std::filesystem::path& file, const std::string& what);

// Readers adding to `out` (InputError for an item already there).
void read_engine_safetensors(const std::filesystem::path& file, EngineOutput& out);
void read_engine_jsonl(const std::filesystem::path& file, EngineOutput& out);

// PATH as above, by its kind (directory, .safetensors, .jsonl); InputError for another kind.
EngineOutput read_engine_output(const std::filesystem::path& path);

}  // namespace kvcheck::cli
