// The engine_output fuzz target (properties/fuzz/fuzz_targets.h): kvcheck compare's readers of
// another engine's outputs (cli/engine_output.h). The input's first bytes choose the parser, as
// a user's file extension does: "\x93NUMPY" a .npy logits array, '{' (or blank space) a top-k /
// generated-ids JSONL file, anything else a .safetensors file. What a parser accepts must keep
// its promises: logits [rows, cols] all finite; top-k entries at most 0 whose probabilities sum to
// at most 1 + 1e-3, distinct tokens; generated ids >= 0.
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <system_error>

#include "cli/engine_output.h"
#include "properties/fuzz/fuzz_targets.h"
#include "reference/errors.h"

namespace kvcheck::fuzz {
namespace {

std::filesystem::path scratch_file(const char* ext) {
  const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
  return dir / ("kvcheck-fuzz-engine-" + std::to_string(::getpid()) + ext);
}

void check_logits(std::int64_t rows, std::int64_t cols, const std::vector<float>& data) {
  if (rows <= 0 || cols <= 0 || static_cast<std::size_t>(rows * cols) != data.size()) std::abort();
  for (const float x : data) {
    if (!std::isfinite(x)) std::abort();
  }
}

void check_output(const cli::EngineOutput& out) {
  for (const auto& [id, item] : out.items) {
    if (!item.logits.empty()) check_logits(item.positions, item.vocab, item.logits);
    for (const auto& position : item.topk) {
      if (position.empty()) std::abort();
      double mass = 0.0;
      std::set<std::int32_t> tokens;
      for (const cli::TopkEntry& e : position) {
        if (!(e.logprob <= 0.0) || e.token < 0 || !tokens.insert(e.token).second) std::abort();
        mass += std::exp(e.logprob);
      }
      if (mass > 1.0 + 1e-3) std::abort();
    }
    if (item.generated) {
      for (const std::int32_t t : *item.generated) {
        if (t < 0) std::abort();
      }
    }
  }
}

}  // namespace

int engine_output(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const std::size_t first = bytes.find_first_not_of(" \t\r\n");
  const char* ext = bytes.starts_with("\x93NUMPY") ? ".npy" : first != std::string_view::npos && bytes[first] == '{' ? ".jsonl" : ".safetensors";
  const std::filesystem::path file = scratch_file(ext);
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  try {
    cli::EngineOutput out;
    if (std::string_view(ext) == ".npy") {
      const cli::LogitsArray a = cli::read_logits_npy(file, "fuzz");
      check_logits(a.rows, a.cols, a.data);
    } else if (std::string_view(ext) == ".jsonl") {
      cli::read_engine_jsonl(file, out);
    } else {
      cli::read_engine_safetensors(file, out);
    }
    check_output(out);
  } catch (const InputError&) {
  }
  std::error_code ignored;
  std::filesystem::remove(file, ignored);
  return 0;
}

}  // namespace kvcheck::fuzz
