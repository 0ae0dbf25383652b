// The gguf fuzz target: arbitrary bytes as a GGUF file. What the reader accepts must keep its
// promises: every tensor's bytes lie inside the mapping (ASan reads them all), readable types
// dequantize, and the model and tokenizer built from the metadata either load or are refused
// with an InputError; a tokenizer that loads encodes and decodes fixed strings within its vocabulary.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "properties/fuzz/fuzz_targets.h"
#include "reference/errors.h"
#include "reference/gguf.h"
#include "reference/gguf_model.h"
#include "reference/gguf_quants.h"
#include "reference/tokenizer.h"
#include "reference/tokenizer_backend.h"

namespace kvcheck::fuzz {
namespace {

const std::filesystem::path& gguf_scratch_file() {
  static const std::filesystem::path path = [] {
    const std::filesystem::path dir = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    return dir / ("kvcheck-fuzz-" + std::to_string(::getpid()) + ".gguf");
  }();
  return path;
}

constexpr std::int64_t kMaxElements = std::int64_t{1} << 22;  // what one input may make us dequantize

void read_file(const std::filesystem::path& path) {
  const GgufFile file = GgufFile::open(path);
  std::int64_t elements = 0;
  unsigned sum = 0;
  for (const GgufTensorInfo& t : file.tensors()) {
    for (const std::byte b : t.data) sum += static_cast<unsigned>(b);
    if (!ggml_type_readable(t.type) || (elements += t.numel()) > kMaxElements) continue;
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    dequantize_ggml(t.type, t.data, out);
  }
  static volatile unsigned sink = 0;
  sink = sink + sum;
  try {
    (void)gguf_model_config(file);
    if (elements <= kMaxElements) (void)load_gguf_model(path);
  } catch (const InputError&) {
  }
  if (file.find("tokenizer.ggml.model") == nullptr) return;
  const GgufTokenizer tok = gguf_tokenizer(file);
  const auto backend = make_tokenizer_json_backend(tok.tokenizer_json, path.string(), tok.bos_id, tok.eos_id, "gguf");
  for (const char* text : {"Hello, world! 123", " \n\t", "\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80 \xFF"}) {
    const std::vector<std::int32_t> ids = backend->encode(text, true);
    for (const std::int32_t id : ids) {
      if (id < 0 || id >= backend->vocab_size()) std::abort();
    }
    (void)backend->decode(ids);
  }
}

}  // namespace

int gguf(const std::uint8_t* data, std::size_t size) {
  {
    std::ofstream out(gguf_scratch_file(), std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  try {
    read_file(gguf_scratch_file());
  } catch (const InputError&) {
  }
  std::error_code ignored;
  std::filesystem::remove(gguf_scratch_file(), ignored);
  return 0;
}

}  // namespace kvcheck::fuzz
