#include "properties/fuzz/fuzz_targets.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "bench/serving_workload.h"
#include "cli/report_baseline.h"
#include "reference/config.h"
#include "reference/errors.h"
#include "reference/safetensors.h"
#include "reference/tokenizer.h"

#ifndef KVCHECK_SOURCE_DIR
#error "KVCHECK_SOURCE_DIR must name the source tree (the embedded model's tokenizer.model)"
#endif

namespace kvcheck::fuzz {
namespace {

// One scratch file per process, in memory when /dev/shm exists: the safetensors reader maps files.
// It lives only while one input is read.
const std::filesystem::path& scratch_file() {
  static const std::filesystem::path path = [] {
    const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    return dir / ("kvcheck-fuzz-" + std::to_string(::getpid()) + ".safetensors");
  }();
  return path;
}

}  // namespace

int safetensors(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(scratch_file(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const SafetensorsFile file = SafetensorsFile::open(scratch_file());
    unsigned sum = 0;
    for (const std::string& name : file.names()) {
      const auto view = file.find(name);
      if (!view) std::abort();  // a listed name must be found
      for (const std::byte b : view->bytes) sum += static_cast<unsigned>(b);  // ASan: every byte in bounds
      (void)file.origin(name);
    }
    (void)file.metadata();
    static volatile unsigned sink = 0;
    sink = sink + sum;
  } catch (const InputError&) {
  }
  // Removed after every input (the mapping is closed by now), so that no run leaves a file behind.
  std::error_code ignored;
  std::filesystem::remove(scratch_file(), ignored);
  return 0;
}

int config(const std::uint8_t* data, std::size_t size) {
  const nlohmann::json json =
      nlohmann::json::parse(std::string_view(reinterpret_cast<const char*>(data), size), nullptr, false);
  if (json.is_discarded()) return 0;  // not JSON: load_config reports that itself
  try {
    const ModelConfig c = parse_config(json, "fuzz/config.json");
    (void)config_to_json(c);
  } catch (const InputError&) {
  }
  return 0;
}

int tokenizer(const std::uint8_t* data, std::size_t size) {
  static const Tokenizer tok =
      Tokenizer::load(std::filesystem::path(KVCHECK_SOURCE_DIR) / "datasets/models/kvcheck-tiny/tokenizer.model");
  try {
    const std::vector<std::int32_t> ids = tok.encode(std::string_view(reinterpret_cast<const char*>(data), size), true);
    (void)tok.decode(ids);
  } catch (const InputError&) {
  }
  return 0;
}

int workload_jsonl(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    // The embedded model's context and vocabulary, as `kvcheck bench --workload-file` reads it.
    const std::vector<ServingRequest> requests = parse_serving_workload(text, "fuzz.jsonl", 512, 2048);
    // What the loader promises of every request it returns.
    for (const ServingRequest& r : requests) {
      if (r.prompt_tokens < 1 || r.output_tokens < 0 || r.prompt_tokens + r.output_tokens > 512 ||
          r.shared_prefix_tokens < 0 || r.shared_prefix_tokens > r.prompt_tokens || !(r.arrival_s >= 0.0) ||
          (!r.prompt.empty() && static_cast<std::int64_t>(r.prompt.size()) != r.prompt_tokens)) {
        std::abort();
      }
      for (const std::int32_t id : r.prompt) {
        if (id < 0 || id >= 2048) std::abort();
      }
    }
  } catch (const InputError&) {
  }
  return 0;
}

int report_baseline(const std::uint8_t* data, std::size_t size) {
  try {
    const cli::ReportBaseline b =
        cli::parse_report_baseline(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.json");
    // What the gate reads of an accepted baseline must be usable as is.
    (void)cli::compare_to_baseline(b, b.rows);
  } catch (const InputError&) {
  }
  return 0;
}

}  // namespace kvcheck::fuzz
