// The items file of kvcheck export / kvcheck compare (docs/reports.md, "Checking another engine"): the exact
// token ids of a report's held-out windows and retrieval items, so that any engine can be run on
// them and its outputs compared with the reference's. JSONL:
//   line 1   {"format": "kvcheck-items", "version": 1, "model_hash", "heldout_hash", "retrieval_hash",
//             "items_hash", "vocab_size", "prompt_source", "settings": {"prompts", "prompt_tokens",
//             "continuation_tokens", "retrieval_items"}}
//   text     {"id": "text-N", "kind": "text", "source", "prompt_ids": [...], "continuation_ids": [...]}
//            (the continuation is teacher-forced; the engine's logits at the positions that predict
//            each continuation token are compared: one row per continuation token)
//   retrieval {"id": "retrieval-ID", "kind": "retrieval", "task", "length", "prompt_ids": [...],
//             "answer_ids": [...], "max_new_tokens": n}  (greedy; exact match with answer_ids)
// items_hash is the FNV-1a hash of the item lines (each with its newline), so an edited item is
// caught; model_hash must be the model's (cli/report_reference_cache.h).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/accuracy_run.h"
#include "reference/config.h"

namespace kvcheck::cli {

struct ItemsFile {
  nlohmann::json header;
  AccuracyInputs inputs;                // prompts (prompt + continuation ids), retrieval cases; no reference
  std::vector<std::string> text_ids;    // per inputs.prompts
  std::vector<std::string> retrieval_ids;  // per inputs.retrieval
};

// The id of text window `index` and of a retrieval item.
std::string text_item_id(std::size_t index);
std::string retrieval_item_id(const RetrievalItem& item);

// Writes the items of `inputs` (prompt_tokens prompt ids and the rest as continuation) with
// `header` (model_hash, heldout_hash, retrieval_hash, vocab_size, prompt_source, settings) and
// items_hash added; format and version are set here.
void write_items_file(const std::filesystem::path& file, nlohmann::json header, const AccuracyInputs& inputs);

// Reads and checks an items file against the model (its hash and vocabulary): InputError naming
// FILE:LINE and the field for anything malformed, a duplicate id, a token id outside the
// vocabulary, a window that does not fit the model's context or differs in size from the
// settings, an items_hash that does not match the items, a model_hash or vocab_size that is not
// the model's.
ItemsFile read_items_file(const std::filesystem::path& file, const ModelConfig& config, const std::string& model_hash);

}  // namespace kvcheck::cli
