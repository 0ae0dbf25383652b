#include "cli/engine_output_writer.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "oracles/accuracy_metrics.h"
#include "reference/errors.h"
#include "reference/npy.h"
#include "reference/safetensors.h"

namespace kvcheck::cli {
namespace {

// {"TOKEN": logprob} of the k most likely tokens of a logits row (ties: the lower id) and `target`.
nlohmann::json topk_position(std::span<const float> row, std::int64_t k, std::int32_t target) {
  const std::vector<double> lp = log_softmax(row);
  std::vector<std::int32_t> order(lp.size());
  std::iota(order.begin(), order.end(), 0);
  const auto kk = static_cast<std::ptrdiff_t>(std::min<std::size_t>(static_cast<std::size_t>(k), lp.size()));
  std::partial_sort(order.begin(), order.begin() + kk, order.end(), [&](std::int32_t a, std::int32_t b) {
    return lp[static_cast<std::size_t>(a)] != lp[static_cast<std::size_t>(b)] ? lp[static_cast<std::size_t>(a)] > lp[static_cast<std::size_t>(b)]
                                                                              : a < b;
  });
  nlohmann::json pos = nlohmann::json::object();
  for (std::ptrdiff_t i = 0; i < kk; ++i) pos[std::to_string(order[static_cast<std::size_t>(i)])] = lp[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])];
  pos[std::to_string(target)] = lp[static_cast<std::size_t>(target)];
  return pos;
}

std::string generated_lines(const ItemsFile& items, const EngineCapture& captured) {
  std::string s;
  for (std::size_t i = 0; i < items.retrieval_ids.size(); ++i) {
    s += nlohmann::json({{"id", items.retrieval_ids[i]}, {"generated_ids", captured.generated[i]}}).dump() + "\n";
  }
  return s;
}

void write_text_file(const std::filesystem::path& file, const std::string& text) {
  std::ofstream out(file, std::ios::binary | std::ios::trunc);
  out << text;
  if (!out) throw input_error(file.string(), "--write-engine-output", "cannot be written");
}

}  // namespace

void write_engine_output(const std::filesystem::path& path, const ItemsFile& items, const EngineCapture& captured,
                         std::int64_t top_k) {
  const std::string ext = path.extension().string();
  if (top_k > 0 && ext != ".jsonl") throw input_error(path.string(), "--top-k", "top-k rows are written to a .jsonl file");
  if (top_k <= 0 && ext == ".jsonl") throw input_error(path.string(), "--top-k", "a .jsonl engine output holds top-k rows: give --top-k K");
  const std::int64_t C = items.header.at("settings").at("continuation_tokens").get<std::int64_t>();
  const auto V = static_cast<std::int64_t>(items.header.at("vocab_size").get<std::int64_t>());
  if (ext == ".jsonl") {
    std::string s;
    for (std::size_t p = 0; p < items.text_ids.size(); ++p) {
      nlohmann::json rows = nlohmann::json::array();
      for (std::int64_t i = 0; i < C; ++i) {
        const std::span<const float> row(captured.text_rows[p].data() + i * V, static_cast<std::size_t>(V));
        rows.push_back(topk_position(row, top_k, items.inputs.prompts[p].tokens[static_cast<std::size_t>(items.inputs.prompt_tokens + i)]));
      }
      s += nlohmann::json({{"id", items.text_ids[p]}, {"top_logprobs", rows}}).dump() + "\n";
    }
    write_text_file(path, s + generated_lines(items, captured));
  } else if (ext == ".safetensors") {
    TensorMap tensors;
    for (std::size_t p = 0; p < items.text_ids.size(); ++p) {
      tensors.add_float(items.text_ids[p], DType::kF32, {C, V}, captured.text_rows[p]);
    }
    for (std::size_t i = 0; i < items.retrieval_ids.size(); ++i) {
      const std::vector<std::int64_t> ids(captured.generated[i].begin(), captured.generated[i].end());
      tensors.add(items.retrieval_ids[i], DType::kI64, {static_cast<std::int64_t>(ids.size())}, std::as_bytes(std::span(ids)));
    }
    write_safetensors(path, tensors);
  } else {
    std::filesystem::create_directories(path);
    for (std::size_t p = 0; p < items.text_ids.size(); ++p) {
      write_npy_f32(path / (items.text_ids[p] + ".npy"), C, V, captured.text_rows[p]);
    }
    if (!items.retrieval_ids.empty()) write_text_file(path / "generated.jsonl", generated_lines(items, captured));
  }
}

}  // namespace kvcheck::cli
