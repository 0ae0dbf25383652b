// The tokenizer_json fuzz target (properties/fuzz/fuzz_targets.h): the input is a tokenizer.json
// text; if it loads, a few fixed strings (invalid UTF-8 and special-token text among them) are
// encoded and decoded, and every id must be inside the vocabulary.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "properties/fuzz/fuzz_targets.h"
#include "reference/errors.h"
#include "reference/tokenizer.h"

namespace kvcheck::fuzz {
namespace {

// One scratch directory per process (a tokenizer.json is read from a file; no config files
// beside it), in memory when /dev/shm exists; removed after every input.
const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path path = [] {
    const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    return dir / ("kvcheck-fuzz-tokjson-" + std::to_string(::getpid()));
  }();
  return path;
}

const std::vector<std::string>& probe_texts() {
  static const std::vector<std::string> texts = {
      "Hello world", "  a\n\n b\t", "<s>x</s><|endoftext|>", "\xFF\xFE half \xE2\x82", "h\xC3\xA9llo e\xCC\x81 \xE4\xBD\xA0\xE5\xA5\xBD \xF0\x9F\x98\x80",
      "12345 it's THEY'RE", "\xE2\x96\x81\xE2\x96\x81x", ""};
  return texts;
}

}  // namespace

int tokenizer_json(const std::uint8_t* data, std::size_t size) {
  std::error_code ec;
  std::filesystem::create_directories(scratch_dir(), ec);
  const auto file = scratch_dir() / "tokenizer.json";
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    const Tokenizer tok = Tokenizer::load(file);
    for (const std::string& text : probe_texts()) {
      for (const bool add_bos : {false, true}) {
        const std::vector<std::int32_t> ids = tok.encode(text, add_bos);
        for (const std::int32_t id : ids) {
          if (id < 0 || id >= tok.vocab_size()) std::abort();  // encode must stay inside the vocabulary
        }
        (void)tok.decode(ids);
      }
    }
    if (tok.bos_id() >= tok.vocab_size() || tok.eos_id() >= tok.vocab_size()) std::abort();
  } catch (const InputError&) {
  }
  std::filesystem::remove_all(scratch_dir(), ec);
  return 0;
}

}  // namespace kvcheck::fuzz
